"""Cancelling runs, and reading them: ``inspect`` and ``wait`` on runs in every state."""

from __future__ import annotations

import pathlib

import anyio
import pytest

import tether
from tether._errors import RunStateError
from tether.journal import Decision, RunFinished, ToolResult, ToolStarted
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, craft_dangling, of_type, read_events

use = tether.ScriptedModel.tool_use
RUN = "run-1"


class Ledger:
    def __init__(self) -> None:
        self.ran: list[str] = []
        self.cancelled: list[str] = []
        self.running = anyio.Event()


def tools_for(ledger: Ledger) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", approval=True)
    async def deploy(env: str) -> str:
        """Deploy to an environment."""
        ledger.ran.append(env)
        return f"deployed {env}"

    @tools.tool(policy="rerun")
    async def build(target: str) -> str:
        """Build a target (takes forever)."""
        ledger.ran.append(target)
        ledger.running.set()
        try:
            await anyio.sleep_forever()
        finally:
            ledger.cancelled.append(target)
        return "unreachable"

    @tools.tool
    async def migrate(db: str) -> str:
        """Migrate a database."""
        ledger.ran.append(db)
        return "migrated"

    return tools


def deploy_model() -> tether.ScriptedModel:
    return tether.ScriptedModel([[use("toolu_d", "deploy", {"env": "prod"})], "deployed"])


async def test_cancel_a_parked_run(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    async with Supervisor(
        tether.FileStore(tmp_path), model=deploy_model(), tools=tools_for(ledger)
    ) as sup:
        await sup.start(RUN, "deploy")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.cancel(RUN, reason="change freeze")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
        view = await sup.inspect(RUN)
        assert (view.status, view.reason) == (RunStatus.CANCELLED, "change freeze")
        assert view.pending == ()
        with pytest.raises(RunStateError, match="cancelled"):
            await sup.cancel(RUN)

    assert ledger.ran == []
    events = await read_events(tmp_path, RUN)
    assert events[-1] == RunFinished(
        seq=events[-1].seq, at=events[-1].at, status="cancelled", reason="change freeze"
    )

    # A later process leaves it alone.
    async with Supervisor(
        tether.FileStore(tmp_path), model=deploy_model(), tools=tools_for(ledger)
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
        assert (await sup.inspect(RUN)).reason == "change freeze"
    assert len(await read_events(tmp_path, RUN)) == len(events)


async def test_cancel_a_running_run(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    model = tether.ScriptedModel([[use("toolu_b", "build", {"target": "all"})], "built"])
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools_for(ledger)) as sup:
        await sup.start(RUN, "build")
        with anyio.fail_after(WAIT):
            await ledger.running.wait()
        await sup.cancel(RUN)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
        assert ledger.cancelled == ["all"]

    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, ToolStarted)) == 1
    assert of_type(events, ToolResult) == []
    assert isinstance(events[-1], RunFinished)
    assert (events[-1].status, events[-1].reason) == ("cancelled", "cancelled")
    assert model.calls == 1


async def test_cancel_a_finished_or_unknown_run_is_refused(tmp_path: pathlib.Path) -> None:
    async with Supervisor(tether.FileStore(tmp_path), model=tether.ScriptedModel(["hi"])) as sup:
        await sup.start(RUN, "hello")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        with pytest.raises(RunStateError, match="done"):
            await sup.cancel(RUN)
        assert (await sup.inspect(RUN)).status is RunStatus.DONE
        with pytest.raises(tether.RunNotFoundError):
            await sup.cancel("no-such-run")
        with pytest.raises(tether.RunNotFoundError):
            await sup.inspect("no-such-run")
    events = await read_events(tmp_path, RUN)
    assert [e.status for e in of_type(events, RunFinished)] == ["done"]


async def test_inspect_reads_runs_this_supervisor_never_ran(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    tools = tools_for(ledger)
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=tether.ScriptedModel([[use("toolu_x", "deploy", {"env": "dev"})], "finished"]),
        tools=tools,
    ) as sup:
        await sup.start("done-run", "deploy dev")
        assert await sup.wait("done-run", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide("done-run", "toolu_x", approved=True, by="priya")
        assert await sup.wait("done-run", timeout=WAIT) is RunStatus.DONE
        await sup.start("parked-run", "deploy dev")
        assert await sup.wait("parked-run", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    escalating = tether.ScriptedModel([[use("toolu_m", "migrate", {"db": "main"})], "ok"])
    await craft_dangling(
        tmp_path,
        "escalated-run",
        model=escalating,
        tools=tools,
        block=use("toolu_m", "migrate", {"db": "main"}),
    )
    async with Supervisor(tether.FileStore(tmp_path), model=escalating, tools=tools) as sup:
        assert await sup.wait("escalated-run", timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    ran_before = list(ledger.ran)
    sizes = {r: len(await read_events(tmp_path, r)) for r in ("done-run", "parked-run")}

    model = tether.ScriptedModel(["never asked"])
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools_for(ledger), resume=False
    ) as sup:
        done = await sup.inspect("done-run")
        assert done.status is RunStatus.DONE
        assert done.final_text == "finished"
        assert (done.model_calls, done.tool_calls, done.restarts) == (2, 1, 0)
        assert [m["role"] for m in done.messages] == ["user", "assistant", "user", "assistant"]
        assert done.events == sizes["done-run"]

        parked = await sup.inspect("parked-run")
        assert parked.status is RunStatus.WAITING_FOR_APPROVAL
        assert parked.pending == ("toolu_x",)
        assert parked.final_text is None
        assert "deploy" in parked.reason

        escalated = await sup.inspect("escalated-run")
        assert escalated.status is RunStatus.NEEDS_ATTENTION
        assert "outcome unknown" in escalated.reason
        assert escalated.pending == ("toolu_m",)

        with anyio.fail_after(1):
            assert await sup.wait("done-run") is RunStatus.DONE
            assert await sup.wait("parked-run") is RunStatus.WAITING_FOR_APPROVAL
    assert model.calls == 0
    assert ledger.ran == ran_before
    assert {r: len(await read_events(tmp_path, r)) for r in sizes} == sizes


async def test_wait_on_a_finished_run_returns_at_once(tmp_path: pathlib.Path) -> None:
    async with Supervisor(tether.FileStore(tmp_path), model=tether.ScriptedModel(["hi"])) as sup:
        await sup.start(RUN, "hello")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        with anyio.fail_after(1):
            assert await sup.wait(RUN) is RunStatus.DONE
            assert await sup.wait(RUN, timeout=0) is RunStatus.DONE
    for resume in (True, False):
        async with Supervisor(
            tether.FileStore(tmp_path), model=tether.ScriptedModel(["hi"]), resume=resume
        ) as sup:
            with anyio.fail_after(1):
                assert await sup.wait(RUN) is RunStatus.DONE
    with pytest.raises(tether.RunNotFoundError):
        async with Supervisor(tether.FileStore(tmp_path), model=tether.ScriptedModel([])) as sup:
            await sup.wait("no-such-run", timeout=1)


async def test_decisions_on_a_finished_run_are_refused(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    async with Supervisor(
        tether.FileStore(tmp_path), model=deploy_model(), tools=tools_for(ledger)
    ) as sup:
        await sup.start(RUN, "deploy")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.cancel(RUN)
        try:
            with pytest.raises(RunStateError):
                await sup.decide(RUN, "toolu_d", approved=True, by="priya")
        finally:
            events = await read_events(tmp_path, RUN)
            assert of_type(events, Decision) == []
            assert isinstance(events[-1], RunFinished)


async def test_wait_after_a_failed_action_on_an_unknown_run_still_says_not_found(
    tmp_path: pathlib.Path,
) -> None:
    async with Supervisor(tether.FileStore(tmp_path), model=tether.ScriptedModel([])) as sup:
        with pytest.raises(tether.RunNotFoundError):
            await sup.decide("no-such-run", "toolu_1", approved=True, by="priya")
        with pytest.raises(tether.RunNotFoundError):
            await sup.wait("no-such-run", timeout=0.5)
