"""A pydantic-ai agent whose tools are a real MCP server's (``MCPToolset`` over stdio, the help
desk server of ``examples/helpdesk_mcp_server.py``) as a tether run: each tool registered from
the server's own listing, each call journaled and run under its policy, the reply's idempotency
key sent in the request's ``_meta``, the server's tools listed once for the supervisor's whole
life (not once per step), and the result replayed from the journal without asking the server.
(``tests/integrations/test_crashtest.py`` kills the run's processes.)"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import tether
from examples.pydantic_ai_mcp_agent import REPLY, TICKET, durable_agent, helpdesk
from tether.journal import ToolResult
from tether.supervisor import RunStatus, Supervisor

from ..supervisor._helpers import WAIT, of_type, read_events

RUN = "run-kite-7"


def counted(calls: list[str], name: str, method: Callable[..., Awaitable[Any]]) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return await method(*args, **kwargs)

    return call


async def test_the_agents_mcp_tools_are_journaled_run_once_and_listed_once(
    tmp_path: Path,
) -> None:
    server = helpdesk(tmp_path)
    calls: list[str] = []
    server.client.list_tools = counted(calls, "list", server.client.list_tools)  # type: ignore[method-assign]
    server.client.call_tool = counted(calls, "call", server.client.call_tool)  # type: ignore[method-assign]
    app = durable_agent(tmp_path, server)
    async with Supervisor(
        tether.FileStore(tmp_path / "store"), model=app.model, tools=app.tools, sweep_interval=None
    ) as sup:
        specs = {spec.name: spec for spec in app.tools}
        await sup.start(RUN, f"Handle ticket {TICKET}.")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        during = list(calls)
        result = await app.result(sup, RUN)
    assert calls == during  # the result is replayed: no listing, no call
    assert during == ["list", "call", "call", "call"]  # four steps, one listing
    assert result.output == f"{TICKET}: replied (reply-1) and marked solved."
    assert {name: spec.policy.value for name, spec in specs.items()} == {
        "tether_continue": "rerun",
        "lookup_ticket": "rerun",
        "send_reply": "idempotency_key",
        "set_status": "rerun",
    }
    assert specs["send_reply"].definition()["description"] == (
        "Email a reply to the ticket's customer."
    )

    events = await read_events(tmp_path / "store", RUN)
    results = [r.content for r in of_type(events, ToolResult)]
    assert results[0] == f"{TICKET} from dana@example.com: locked out after SSO"
    with contextlib.closing(sqlite3.connect(tmp_path / "helpdesk.db")) as db:
        replies = db.execute("SELECT text, key FROM replies").fetchall()
        statuses = db.execute("SELECT ticket, status FROM statuses").fetchall()
    (send,) = [e for e in of_type(events, ToolResult) if "reply-" in str(e.content)]
    assert replies == [(REPLY, f"{RUN}:{send.call_id}")]
    assert statuses == [(TICKET, "solved")]
