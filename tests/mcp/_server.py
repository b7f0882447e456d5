"""A real MCP server for the tests, on the ``mcp`` SDK's server side.

``python _server.py stdio`` serves over stdio; ``python _server.py http PORT`` serves
streamable HTTP on 127.0.0.1:PORT (path ``/mcp``). Everything it keeps lives in the directory
named by ``MCP_TEST_DIR``, since a test kills it and starts it again:

- ``pid``: the pid of the latest server process (written at start);
- ``ledger``: one line per effect (``lookup K-1``, ``reply K-1 key=run:toolu_1``, ...),
  appended under a lock before the tool answers;
- ``hang-TOOL``: when present, the next call of TOOL removes it, writes its ledger line and
  then waits forever (so the test can kill the server mid-call);
- ``variant``: ``v2`` adds a required ``priority`` to ``lookup``'s schema; ``gone`` drops
  ``lookup``;
- ``log-like-fastmcp``: when present at start, the server logs as a FastMCP server does, an
  INFO line per request on its standard error, and ``fail`` logs an error with its traceback.

``send_reply`` honours the idempotency key tether sends in ``_meta``: a key it has served is
answered again without a second effect.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server

KEY = "tether/idempotency-key"
DIR = Path(os.environ["MCP_TEST_DIR"])
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 16).decode()

server: Server[Any, Any] = Server("test-helpdesk")


def variant() -> str:
    try:
        return (DIR / "variant").read_text().strip()
    except FileNotFoundError:
        return "v1"


def record(line: str) -> None:
    with open(DIR / "ledger", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def served_keys() -> set[str]:
    try:
        lines = (DIR / "ledger").read_text().splitlines()
    except FileNotFoundError:
        return set()
    return {line.rsplit("key=", 1)[1] for line in lines if " key=" in line}


def read_only(**more: Any) -> types.ToolAnnotations:
    return types.ToolAnnotations(readOnlyHint=True, **more)


def string_props(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {n: {"type": "string"} for n in names},
        "required": list(names),
    }


@server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
async def list_tools() -> list[types.Tool]:
    lookup_schema = string_props("ticket")
    if variant() == "v2":
        lookup_schema = string_props("ticket", "priority")
    tools = [
        types.Tool(
            name="lookup",
            description="Look a ticket up.",
            inputSchema=lookup_schema,
            annotations=read_only(),
        ),
        types.Tool(
            name="send_reply",
            description="Send a reply to the customer.",
            inputSchema=string_props("ticket", "text"),
        ),
        types.Tool(
            name="set_status",
            description="Set a ticket's status.",
            inputSchema=string_props("ticket", "status"),
            annotations=types.ToolAnnotations(readOnlyHint=False, idempotentHint=True),
        ),
        types.Tool(
            name="chart",
            description="A chart of the queue.",
            inputSchema={"type": "object", "properties": {}},
            annotations=read_only(),
        ),
        types.Tool(
            name="fail",
            description="Always fails.",
            inputSchema={"type": "object", "properties": {}},
            annotations=read_only(),
        ),
        types.Tool(
            name="report",
            description="Queue figures.",
            inputSchema={"type": "object", "properties": {"queue": {"type": "string"}}},
            annotations=read_only(),
        ),
    ]
    if variant() == "gone":
        tools = tools[1:]
    return tools


def hang_asked(tool: str) -> bool:
    """Whether this call is to hang (taken before its ledger line: a kill after the line must
    not leave the flag for the next call)."""
    flag = DIR / f"hang-{tool}"
    try:
        flag.unlink()
    except FileNotFoundError:
        return False
    return True


async def hang_if(hang: bool) -> None:
    if hang:
        await anyio.sleep_forever()


@server.call_tool()  # type: ignore[untyped-decorator]
async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
    ctx = server.request_context
    meta = ctx.meta.model_dump() if ctx.meta is not None else {}
    key = meta.get(KEY)
    hang = hang_asked(name)
    if name == "lookup":
        record(f"lookup {arguments['ticket']}")
        await hang_if(hang)
        return [types.TextContent(type="text", text=f"{arguments['ticket']}: locked out after SSO")]
    if name == "send_reply":
        if key is not None and key in served_keys():
            return [types.TextContent(type="text", text="sent (already)")]
        record(f"reply {arguments['ticket']} key={key}")
        await hang_if(hang)
        return [types.TextContent(type="text", text="sent")]
    if name == "set_status":
        record(f"status {arguments['ticket']} {arguments['status']}")
        await hang_if(hang)
        return [types.TextContent(type="text", text="ok")]
    if name == "chart":
        return [
            types.TextContent(type="text", text="the queue this week"),
            types.ImageContent(type="image", data=PNG, mimeType="image/png"),
        ]
    if name == "fail":
        if (DIR / "log-like-fastmcp").exists():
            try:
                raise RuntimeError("the queue is locked")
            except RuntimeError:
                logging.getLogger("helpdesk").exception("fail: the queue is locked")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="the queue is locked")], isError=True
        )
    if name == "report":
        return {"queue": arguments.get("queue", "all"), "open": 12}
    raise ValueError(f"no tool {name}")


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(port: int) -> None:
    import contextlib
    from collections.abc import AsyncIterator

    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.types import Receive, Scope, Send

    manager = StreamableHTTPSessionManager(app=server)

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Mount("/mcp", app=handle)], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    (DIR / "pid").write_text(str(os.getpid()))
    if (DIR / "log-like-fastmcp").exists():
        # What a FastMCP server does: an INFO line per request on standard error (rich's
        # handler when rich is installed), and the traceback of an error it logs.
        from mcp.server.fastmcp.utilities.logging import configure_logging

        configure_logging("INFO")
    if sys.argv[1] == "stdio":
        anyio.run(serve_stdio)
    else:
        serve_http(int(sys.argv[2]))


if __name__ == "__main__":
    main()
