"""Tools of a real MCP server over streamable HTTP (a uvicorn subprocess on a free port)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

import tether
from tether.journal import Escalated, ToolFailed, ToolStarted
from tether.mcp import MCPServer
from tether.supervisor import RunStatus, Supervisor

from ..supervisor._helpers import of_type, read_events, results_by_id
from ._helpers import WAIT, free_port, http_server, ledger, until_in_ledger, until_status

use = tether.ScriptedModel.tool_use
RUN = "run-1"


def no_jitter() -> float:
    return 0.0


def http(port: int, **options: object) -> MCPServer:
    return MCPServer("helpdesk", url=f"http://127.0.0.1:{port}/mcp", **options)  # type: ignore[arg-type]


async def test_tools_over_http_are_registered_and_called_with_the_key(tmp_path: Path) -> None:
    world, port = tmp_path / "world", free_port()
    tools = tether.ToolRegistry()
    tools.add_source(http(port, trusted=True, idempotency_key=True))
    model = tether.ScriptedModel(
        [
            [
                use("toolu_1", "lookup", {"ticket": "K-1"}),
                use("toolu_2", "send_reply", {"ticket": "K-1", "text": "Fixed."}),
            ],
            "done",
        ]
    )
    with http_server(world, port):
        async with Supervisor(tether.FileStore(tmp_path / "s"), model=model, tools=tools) as sup:
            assert tools.get("send_reply").policy is tether.ReplayPolicy.IDEMPOTENCY_KEY
            await sup.start(RUN, "help")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
            view = await sup.inspect(RUN)
    results = results_by_id(view.messages)
    assert results["toolu_1"]["content"] == "K-1: locked out after SSO"
    assert sorted(ledger(world)) == ["lookup K-1", "reply K-1 key=run-1:toolu_2"]


@pytest.mark.slow
async def test_an_http_server_killed_mid_call_runs_a_rerun_tool_again_once_it_is_back(
    tmp_path: Path,
) -> None:
    world, port = tmp_path / "world", free_port()
    world.mkdir()
    (world / "hang-lookup").touch()
    tools = tether.ToolRegistry()
    tools.add_source(http(port, trusted=True, retries=6))
    model = tether.ScriptedModel([[use("toolu_1", "lookup", {"ticket": "K-1"})], "done"])
    store = tether.FileStore(tmp_path / "s")
    with http_server(world, port) as server:
        sup = Supervisor(store, model=model, tools=tools, jitter=no_jitter)
        async with sup:
            await sup.start(RUN, "go")
            await until_in_ledger(world, "lookup K-1")
            server.kill()
            server.wait()
            with http_server(world, port):  # back on the same port
                await until_status(sup, RUN, RunStatus.DONE)
    events = await read_events(tmp_path / "s", RUN)
    failed = of_type(events, ToolFailed)
    assert failed[0].timed_out  # the stream broke: outcome unknown
    assert "was lost while the call waited" in failed[0].error
    assert all(f.unsent and not f.timed_out for f in failed[1:])  # not reachable: not sent
    assert ledger(world) == ["lookup K-1", "lookup K-1"]
    assert len(of_type(events, ToolStarted)) == len(failed) + 1


@pytest.mark.slow  # real backoff on the wall clock (a uvicorn server cannot be virtual)
async def test_a_call_waits_for_a_server_that_is_down_and_runs_once_it_is_up(
    tmp_path: Path,
) -> None:
    """The server stops between registering and the call: the run rests (``sleeping``,
    saying it waits for the server and that nothing was sent) for longer than its ``retries``
    would have lasted; started again, the server gets the call once, and the run ends done
    with its result. A ``send_reply`` of an untrusted server (``escalate``): nothing was
    sent, so there is nothing for a person to settle."""
    world, port = tmp_path / "world", free_port()
    tools = tether.ToolRegistry()
    tools.add_source(http(port, retries=0))  # untrusted: every tool is escalate
    model = tether.ScriptedModel(
        [[use("toolu_1", "send_reply", {"ticket": "K-1", "text": "Fixed."})], "replied"]
    )
    store = tether.FileStore(tmp_path / "s")
    with http_server(world, port) as server:
        sup = Supervisor(store, model=model, tools=tools, jitter=no_jitter)
        async with sup:  # registered while the server was up
            server.kill()
            server.wait()
            await sup.start(RUN, "reply to K-1")
            reason = await _tried_at_least(sup, 3)
            assert reason.startswith("send_reply (toolu_1) waiting for its service: ")
            assert "nothing was sent" in reason
            assert ledger(world) == []
            with http_server(world, port):  # up again, on the same port
                await until_status(sup, RUN, RunStatus.DONE)
            view = await sup.inspect(RUN)
    assert results_by_id(view.messages)["toolu_1"]["is_error"] is False
    assert ledger(world) == ["reply K-1 key=run-1:toolu_1"]  # carried out once
    events = await read_events(tmp_path / "s", RUN)
    failed = of_type(events, ToolFailed)
    assert len(failed) >= 3
    assert all(f.unsent and not f.timed_out for f in failed)
    assert not of_type(events, Escalated)
    assert [s.attempt for s in of_type(events, ToolStarted)] == list(range(1, len(failed) + 2))


async def test_an_http_server_killed_mid_call_escalates_an_escalate_tool(tmp_path: Path) -> None:
    world, port = tmp_path / "world", free_port()
    world.mkdir()
    (world / "hang-send_reply").touch()
    tools = tether.ToolRegistry()
    tools.add_source(http(port))  # untrusted: escalate
    model = tether.ScriptedModel([[use("toolu_1", "send_reply", {"ticket": "K", "text": "x"})]])
    store = tether.FileStore(tmp_path / "s")
    with http_server(world, port) as server:
        async with Supervisor(store, model=model, tools=tools) as sup:
            await sup.start(RUN, "go")
            await until_in_ledger(world, "reply K key=run-1:toolu_1")
            server.kill()
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    events = await read_events(tmp_path / "s", RUN)
    (escalated,) = of_type(events, Escalated)
    assert "outcome unknown" in escalated.reason
    assert [s.attempt for s in of_type(events, ToolStarted)] == [1]
    assert ledger(world) == ["reply K key=run-1:toolu_1"]


async def _tried_at_least(sup: Supervisor, tries: int) -> str:
    """The reason of the run once it rests after ``tries`` tries or more: no assumption on
    how fast they come (a loaded machine may skip past any one of them)."""
    with anyio.fail_after(WAIT * 3):
        while True:
            view = await sup.inspect(RUN)
            found = re.search(r"tried (\d+) times in a row", view.reason)
            if view.status is RunStatus.SLEEPING and found and int(found[1]) >= tries:
                return view.reason
            await anyio.sleep(0.02)
