"""The help desk of ``examples.helpdesk_mcp`` as an MCP server over stdio (the ``mcp`` SDK).

    python examples/helpdesk_mcp_server.py ROOT

Everything it keeps is in ``ROOT/helpdesk.db`` (SQLite), so the server can be started anew by
every process that uses it and still know what it did:

===================  ==========================================  ============================
tool                 annotations                                 effect
===================  ==========================================  ============================
``lookup_ticket``    ``readOnlyHint``                            none
``set_status``       ``idempotentHint`` (not read-only)          sets the ticket's status:
                                                                 setting it again changes
                                                                 nothing
``send_reply``       none (so: not read-only, not idempotent)    one reply per call, unless
                                                                 the request's ``_meta``
                                                                 carries a key it has served:
                                                                 then it answers as the first
                                                                 time and sends nothing
===================  ==========================================  ============================
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

IDEMPOTENCY_KEY_META = (
    "tether/idempotency-key"  # what tether.mcp sends; a server need not import it
)
TICKET = {"ticket": "KITE-7", "customer": "dana@example.com", "issue": "locked out after SSO"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ticket TEXT NOT NULL, text TEXT NOT NULL, key TEXT
);
CREATE TABLE IF NOT EXISTS statuses (ticket TEXT PRIMARY KEY, status TEXT NOT NULL);
"""

server: Server[Any, Any] = Server("helpdesk")


def connect(root: Path) -> sqlite3.Connection:
    db = sqlite3.connect(root / "helpdesk.db", isolation_level=None)
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    return db


def _object(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


@server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
async def list_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="lookup_ticket",
            description="Look a ticket up.",
            inputSchema=_object(ticket="string"),
            annotations=types.ToolAnnotations(readOnlyHint=True),
        ),
        types.Tool(
            name="set_status",
            description="Set a ticket's status.",
            inputSchema=_object(ticket="string", status="string"),
            annotations=types.ToolAnnotations(readOnlyHint=False, idempotentHint=True),
        ),
        types.Tool(
            name="send_reply",
            description="Email a reply to the ticket's customer.",
            inputSchema=_object(ticket="string", text="string"),
        ),
    ]


def _text(text: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=text)]


def _send_reply(root: Path, ticket: str, text: str, key: str | None) -> str:
    with contextlib.closing(connect(root)) as db:
        db.execute("BEGIN IMMEDIATE")
        if key is not None:
            row = db.execute("SELECT id FROM replies WHERE key = ?", (key,)).fetchone()
            if row is not None:  # served before: the same answer, no second email
                db.execute("COMMIT")
                return f"reply-{row[0]}"
        cur = db.execute(
            "INSERT INTO replies (ticket, text, key) VALUES (?, ?, ?)", (ticket, text, key)
        )
        db.execute("COMMIT")
        return f"reply-{cur.lastrowid}"


def _set_status(root: Path, ticket: str, status: str) -> None:
    with contextlib.closing(connect(root)) as db:
        db.execute(
            "INSERT OR REPLACE INTO statuses (ticket, status) VALUES (?, ?)", (ticket, status)
        )


@server.call_tool()  # type: ignore[untyped-decorator]
async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
    root = Path(sys.argv[1])
    meta = server.request_context.meta
    key = None if meta is None else meta.model_dump().get(IDEMPOTENCY_KEY_META)
    ticket = str(arguments["ticket"])
    if name == "lookup_ticket":
        if ticket != TICKET["ticket"]:
            return _text(f"no ticket {ticket}")
        return _text(f"{ticket} from {TICKET['customer']}: {TICKET['issue']}")
    if name == "set_status":
        await anyio.to_thread.run_sync(_set_status, root, ticket, str(arguments["status"]))
        return _text(f"{ticket} is {arguments['status']}")
    if name == "send_reply":
        reply = await anyio.to_thread.run_sync(
            _send_reply, root, ticket, str(arguments["text"]), key
        )
        return _text(reply)
    raise ValueError(f"no tool {name!r}")


async def serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(serve)
