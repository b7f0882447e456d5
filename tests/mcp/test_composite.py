"""A tool of one's own that calls an MCP server itself (``MCPServer.call``).

Its ``ToolUnavailableError`` says nothing was sent to the server, not that the tool did
nothing: a refund tool may have charged money before it asked the server. So it is bound to
no attempt, and the runtime treats it as the exception it is (the tool's error result, or a
``retry_on`` failure), never as a call to try again until the server answers; a tool that
knows its attempt sent nothing says so with ``attempt=ctx``.
"""

from __future__ import annotations

from pathlib import Path

import anyio

import tether
from tether.journal import Escalated, ToolFailed, ToolStarted
from tether.mcp import MCPServer
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..supervisor._helpers import of_type, read_events, result_of
from ._helpers import WAIT, free_port, http_server

use = tether.ScriptedModel.tool_use
RUN = "run-1"


async def test_a_composite_tool_that_invokes_a_registered_mcp_tool_runs_once(
    tmp_path: Path,
) -> None:
    """A composite ``escalate`` tool that pays, then delegates to a registered MCP tool with
    its own context (``tools.get(name).invoke(args, ctx)``), its server down: the adapter
    binds its error only for an attempt of its own tool, so the composite's attempt is not
    taken as never sent (and paid for again on every try): the model hears the error once."""
    world, port = tmp_path / "world", free_port()
    server = MCPServer(
        "helpdesk", url=f"http://127.0.0.1:{port}/mcp", trusted=True, connect_timeout=3
    )
    tools = tether.ToolRegistry()
    charges: list[int] = []

    @tools.tool(policy="escalate")
    async def refund_and_reply(ticket: str, ctx: tether.ToolContext) -> object:
        """Refund, then tell the customer (through the helpdesk's own tool)."""
        charges.append(ctx.attempt)  # the money left: must not be repeated
        return await tools.get("send_reply").invoke({"ticket": ticket, "text": "done"}, ctx)

    model = tether.ScriptedModel([[use("toolu_1", "refund_and_reply", {"ticket": "T-1"})], "sorry"])
    async with server:
        with http_server(world, port):
            await server.register(tools)
        # the server is down from here on
        async with Supervisor(
            tether.FileStore(tmp_path / "s"),
            model=model,
            tools=tools,
            clock=VirtualClock(autojump_threshold=0),
        ) as sup:
            await sup.start(RUN, "refund T-1")
            with anyio.fail_after(WAIT):
                assert await sup.wait(RUN) is RunStatus.DONE
    assert charges == [1]
    events = await read_events(tmp_path / "s", RUN)
    result = result_of(events, "toolu_1")
    assert not result.ok
    assert "cannot open a session" in str(result.content)
    assert of_type(events, ToolFailed) == []
    assert len(of_type(events, ToolStarted)) == 1


def down() -> MCPServer:
    """An MCP server nothing listens for: no session can be opened."""
    return MCPServer("ledger", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=5)


async def test_a_composite_tool_whose_server_is_down_after_its_effect_runs_it_once(
    tmp_path: Path,
) -> None:
    """An ``escalate`` refund that pays, then records it on a server that is down: the
    model hears the error, once; the run does not try the refund again (and pay again)."""
    charges: list[str] = []
    server = down()
    tools = tether.ToolRegistry()

    @tools.tool(policy="escalate")
    async def refund(order: str) -> str:
        """Refund an order and record it."""
        charges.append(order)  # the money left: an effect that must not be repeated
        await server.call("record_refund", {"order": order})
        return "refunded"

    model = tether.ScriptedModel([[use("toolu_1", "refund", {"order": "A-7"})], "sorry"])
    async with (
        server,
        Supervisor(
            tether.FileStore(tmp_path),
            model=model,
            tools=tools,
            clock=VirtualClock(autojump_threshold=0),
        ) as sup,
    ):
        await sup.start(RUN, "refund A-7")
        with anyio.fail_after(WAIT):
            assert await sup.wait(RUN) is RunStatus.DONE
    assert charges == ["A-7"]
    events = await read_events(tmp_path, RUN)
    result = result_of(events, "toolu_1")
    assert not result.ok
    assert "MCPServerUnavailableError" in str(result.content)
    assert "cannot open a session" in str(result.content)
    assert of_type(events, ToolFailed) == []
    assert len(of_type(events, ToolStarted)) == 1
    assert of_type(events, Escalated) == []


async def test_unbound_it_is_a_retry_on_failure_when_the_tool_lists_it(tmp_path: Path) -> None:
    """Listed in ``retry_on``, an unbound one spends ``retries`` as before: bounded."""
    tries: list[int] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", retries=2, retry_on=tether.ToolUnavailableError)
    async def search(query: str, ctx: tether.ToolContext) -> str:
        """Search."""
        tries.append(ctx.attempt)
        other = tether.ToolContext(run_id=ctx.run_id, call_id="toolu_9", attempt=1)
        raise tether.ToolUnavailableError("search", "connection refused", attempt=other)

    model = tether.ScriptedModel([[use("toolu_1", "search", {"query": "x"})], "nothing"])
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=model,
        tools=tools,
        clock=VirtualClock(autojump_threshold=0),
    ) as sup:
        await sup.start(RUN, "search")
        with anyio.fail_after(WAIT):
            assert await sup.wait(RUN) is RunStatus.DONE
    assert tries == [1, 2, 3]
    events = await read_events(tmp_path, RUN)
    assert [f.unsent for f in of_type(events, ToolFailed)] == [False, False, False]
    assert not result_of(events, "toolu_1").ok
