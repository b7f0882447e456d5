"""Tools of a real MCP server over stdio, run by a supervisor: policies, keys, results, a server
killed mid-call, and a server whose tools change between a park and a resume."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Escalated, ToolFailed, ToolResult, ToolStarted
from tether.mcp import IDEMPOTENCY_KEY_META, MCPServer, MCPServerUnavailableError, ToolOptions
from tether.supervisor import RunStatus, Supervisor

from .._plain import plain
from ..supervisor._helpers import of_type, read_events, results_by_id
from ._helpers import WAIT, kill_server, ledger, stdio_server, until_in_ledger

use = tether.ScriptedModel.tool_use
RUN = "run-1"


def no_jitter() -> float:
    return 0.0


async def registered(server: MCPServer) -> dict[str, tether.ToolSpec]:
    tools = tether.ToolRegistry()
    async with server:
        return {spec.name: spec for spec in await server.register(tools)}


async def test_a_trusted_servers_annotations_choose_the_policies(tmp_path: Path) -> None:
    specs = await registered(stdio_server(tmp_path, trusted=True))
    policies = {name: spec.policy.value for name, spec in specs.items()}
    assert policies == {
        "lookup": "rerun",  # readOnlyHint
        "send_reply": "escalate",  # says nothing: may change the world, not safe to repeat
        "set_status": "rerun",  # idempotentHint
        "chart": "rerun",
        "fail": "rerun",
        "report": "rerun",
    }
    assert specs["lookup"].definition() == {
        "name": "lookup",
        "description": "Look a ticket up.",
        "input_schema": {
            "type": "object",
            "properties": {"ticket": {"type": "string"}},
            "required": ["ticket"],
        },
    }
    assert specs["lookup"].retries == 2
    assert specs["lookup"].retry_on == ()  # an unreachable server is waited for, not retried

    keyed = await registered(stdio_server(tmp_path, trusted=True, idempotency_key=True))
    assert keyed["send_reply"].policy is tether.ReplayPolicy.IDEMPOTENCY_KEY


async def test_an_untrusted_server_gets_escalate_unless_the_app_says_otherwise(
    tmp_path: Path,
) -> None:
    async def landed(args: dict[str, Any], ctx: tether.ToolContext) -> Any:
        return None

    server = stdio_server(
        tmp_path,
        idempotency_key=True,  # the app's word about keys does not make annotations count
        tools={
            "lookup": ToolOptions(policy="rerun"),
            "send_reply": ToolOptions(verify=landed, approval=True, approval_timeout=60),
        },
        include=["lookup", "send_reply", "set_status"],
        prefix="desk_",
        retries=0,
    )
    specs = await registered(server)
    assert {name: spec.policy.value for name, spec in specs.items()} == {
        "desk_lookup": "rerun",
        "desk_send_reply": "verify",
        "desk_set_status": "escalate",
    }
    reply = specs["desk_send_reply"]
    assert (reply.approval, reply.approval_timeout, reply.verify) == (True, 60.0, landed)
    assert (reply.retries, reply.retry_on) == (0, ())


async def test_a_run_calls_the_servers_tools_with_its_key_and_reads_their_results(
    tmp_path: Path,
) -> None:
    world = tmp_path / "world"
    tools = tether.ToolRegistry()
    tools.add_source(stdio_server(world, trusted=True, idempotency_key=True))
    model = tether.ScriptedModel(
        [
            [
                use("toolu_1", "lookup", {"ticket": "K-1"}),
                use("toolu_2", "send_reply", {"ticket": "K-1", "text": "Fixed."}),
                use("toolu_3", "chart", {}),
                use("toolu_4", "fail", {}),
                use("toolu_5", "report", {"queue": "sso"}),
                use("toolu_6", "lookup", {"ticket": 7}),
            ],
            "done",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path / "store"), model=model, tools=tools) as sup:
        await sup.start(RUN, "help K-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    results = plain(results_by_id(view.messages))
    assert results["toolu_1"]["content"] == "K-1: locked out after SSO"
    assert results["toolu_2"]["content"] == "sent"
    assert results["toolu_3"]["content"][0] == {"type": "text", "text": "the queue this week"}
    assert results["toolu_3"]["content"][1]["type"] == "image"
    assert results["toolu_3"]["content"][1]["source"]["media_type"] == "image/png"
    assert results["toolu_4"] == {
        "type": "tool_result",
        "tool_use_id": "toolu_4",
        "content": [{"type": "text", "text": "the queue is locked"}],
        "is_error": True,
    }
    assert json.loads(results["toolu_5"]["content"]) == {"queue": "sso", "open": 12}
    assert results["toolu_6"]["is_error"]  # refused before the server saw it
    assert "Expected `string`, got `integer`" in results["toolu_6"]["content"]
    # The key reached the server in the request's _meta, under IDEMPOTENCY_KEY_META.
    assert IDEMPOTENCY_KEY_META == "tether/idempotency-key"
    assert sorted(ledger(world)) == ["lookup K-1", "reply K-1 key=run-1:toolu_2"]
    with pytest.raises(ProcessLookupError):  # the supervisor closed the session: it exited
        os.kill(int((world / "pid").read_text()), 0)


@pytest.mark.parametrize(
    ("tool", "args", "effect"),
    [
        ("lookup", {"ticket": "K-1"}, "lookup K-1"),  # readOnlyHint: rerun
        ("set_status", {"ticket": "K-1", "status": "open"}, "status K-1 open"),  # idempotent
    ],
)
async def test_a_server_killed_mid_call_runs_a_rerun_tool_again(
    tmp_path: Path, tool: str, args: dict[str, Any], effect: str
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    (world / f"hang-{tool}").touch()
    tools = tether.ToolRegistry()
    tools.add_source(stdio_server(world, trusted=True))
    model = tether.ScriptedModel([[use("toolu_1", tool, args)], "done"])
    store = tether.FileStore(tmp_path / "store")
    async with Supervisor(store, model=model, tools=tools, jitter=no_jitter) as sup:
        await sup.start(RUN, "go")
        await until_in_ledger(world, effect)
        kill_server(world)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events = await read_events(tmp_path / "store", RUN)
    assert [s.attempt for s in of_type(events, ToolStarted)] == [1, 2]
    (failed,) = of_type(events, ToolFailed)
    assert failed.timed_out  # outcome unknown, not a known failure
    assert "was lost while the call waited" in failed.error
    (result,) = of_type(events, ToolResult)
    assert result.ok
    assert ledger(world) == [effect, effect]  # a new server process ran it again


async def test_a_server_killed_mid_call_escalates_an_escalate_tool(tmp_path: Path) -> None:
    world = tmp_path / "world"
    world.mkdir()
    (world / "hang-send_reply").touch()
    tools = tether.ToolRegistry()
    tools.add_source(stdio_server(world, trusted=True))  # send_reply says nothing: escalate
    model = tether.ScriptedModel([[use("toolu_1", "send_reply", {"ticket": "K", "text": "x"})]])
    store = tether.FileStore(tmp_path / "store")
    async with Supervisor(store, model=model, tools=tools) as sup:
        await sup.start(RUN, "go")
        await until_in_ledger(world, "reply K key=run-1:toolu_1")
        kill_server(world)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert view.pending == ("toolu_1",)
    events = await read_events(tmp_path / "store", RUN)
    (escalated,) = of_type(events, Escalated)
    assert "send_reply attempt 1 ended without a result" in escalated.reason
    assert "was lost while the call waited" in escalated.reason
    assert [s.attempt for s in of_type(events, ToolStarted)] == [1]
    assert ledger(world) == ["reply K key=run-1:toolu_1"]  # never sent again


async def test_an_unreachable_server_is_tried_again_then_an_error_result(
    tmp_path: Path,
) -> None:
    server = MCPServer("gone", command=["/nonexistent/mcp-server"], retries=1)
    async with server:
        with pytest.raises(tether.ToolUnavailableError, match="cannot open a session") as info:
            await server.register(tether.ToolRegistry())
    assert isinstance(info.value, MCPServerUnavailableError)
    assert str(info.value).startswith("MCP server 'gone': cannot open a session (")


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ("v2", "tool 'lookup' version '1' changed its contract"),
        ("gone", "pinned tool 'lookup' version '1' is not registered"),
    ],
)
async def test_a_tool_changed_between_a_park_and_a_resume_stops_the_run(
    tmp_path: Path, variant: str, reason: str
) -> None:
    world = tmp_path / "world"
    store_root = tmp_path / "store"
    model = tether.ScriptedModel(
        [[use("toolu_1", "send_reply", {"ticket": "K", "text": "x"})], "done"]
    )

    def app() -> tether.ToolRegistry:
        tools = tether.ToolRegistry()
        options = {"send_reply": ToolOptions(approval=True)}
        tools.add_source(stdio_server(world, trusted=True, tools=options))
        return tools

    async with Supervisor(tether.FileStore(store_root), model=model, tools=app()) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    (world / "variant").write_text(variant)  # the server is redeployed meanwhile

    async with Supervisor(tether.FileStore(store_root), model=model, tools=app()) as sup:
        await sup.decide(RUN, "toolu_1", approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert reason in view.reason
    assert ledger(world) == []  # nothing ran on the changed contract


async def test_a_tool_changed_while_the_process_runs_is_not_called(tmp_path: Path) -> None:
    world = tmp_path / "world"
    tools = tether.ToolRegistry()
    server = stdio_server(world, trusted=True)
    ctx = tether.ToolContext(run_id="r", call_id="c", attempt=1)
    async with server:
        await server.register(tools)
        (world / "variant").write_text("v2")
        pid = int((world / "pid").read_text())
        kill_server(world)  # while idle: the session notices and the process is reaped
        with anyio.fail_after(WAIT):
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                await anyio.sleep(0.02)
        # The process is gone, but the session may not have read its end yet (the child is
        # reaped apart from the session's reads): a call on it then finds the session lost,
        # and reaches no server. The next call opens a new session.
        for _ in range(3):
            try:
                out = await tools.get("lookup").invoke({"ticket": "K"}, ctx)
                break
            except (tether.OutcomeUnknownError, tether.ToolUnavailableError):
                continue
        else:
            pytest.fail("no new session in three calls")
    assert isinstance(out, tether.ContentBlocks)
    assert out.error
    assert "changed its contract since 'lookup' was registered" in out.blocks[0]["text"]
    assert ledger(world) == []
