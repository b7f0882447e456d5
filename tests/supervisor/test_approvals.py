"""Tools that need a person's approval: parking, decisions, rejections and deadlines."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

import tether
from tether import operate
from tether._errors import RunStateError
from tether.journal import Decision, Escalated, Resumed, ToolStarted
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import (
    WAIT,
    craft_dangling,
    of_type,
    read_events,
    result_of,
    results_by_id,
    wait_for,
)

use = tether.ScriptedModel.tool_use
RUN = "run-1"
CALL = "toolu_03"


def refund_tools(
    ran: list[str],
    *,
    approval_timeout: float | None = None,
    on_approval_timeout: Any = None,
) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(
        policy="idempotency_key",
        approval=True,
        approval_timeout=approval_timeout,
        on_approval_timeout=on_approval_timeout,
    )
    async def issue_refund(order: str) -> str:
        """Refund an order."""
        ran.append(order)
        return f"refunded {order}"

    return tools


def refund_model() -> tether.ScriptedModel:
    return tether.ScriptedModel([[use(CALL, "issue_refund", {"order": "o-1"})], "finished"])


def run_task_alive(run_id: str) -> bool:
    return any(t.get_name() == f"tether-run-{run_id}" and not t.done() for t in asyncio.all_tasks())


async def test_a_parked_run_holds_no_task_lock_or_handle(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    store = tether.FileStore(tmp_path)
    model = refund_model()
    async with Supervisor(store, model=model, tools=refund_tools(ran)) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        view = await sup.inspect(RUN)
        assert view.status is RunStatus.WAITING_FOR_APPROVAL
        assert view.pending == (CALL,)
        assert "issue_refund" in view.reason
        assert ran == []
        assert model.calls == 1

        assert store._open == set()
        assert not run_task_alive(RUN)
        # Another store (its own descriptors, its own flock) can take the journal right now.
        async with tether.FileStore(tmp_path) as other:
            journal = await other.open(RUN)
            assert journal.next_seq == view.events
            await journal.aclose()

        await sup.decide(RUN, CALL, approved=True, by="priya", note="fine")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
        assert store._open == set()

    assert ran == ["o-1"]
    assert model.calls == 2
    assert results_by_id(view.messages)[CALL]["content"] == "refunded o-1"
    assert view.final_text == "finished"
    events = await read_events(tmp_path, RUN)
    (decision,) = of_type(events, Decision)
    assert (decision.approved, decision.by, decision.note) == (True, "priya", "fine")
    (started,) = of_type(events, ToolStarted)
    assert decision.seq < started.seq
    assert of_type(events, Resumed) == []


async def test_a_rejection_reaches_the_model_with_who_and_why(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = refund_model()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=refund_tools(ran)) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide(RUN, CALL, approved=False, by="priya", note="over the refund limit")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ran == []
    block = results_by_id(view.messages)[CALL]
    assert block["is_error"] is True
    assert "over the refund limit" in block["content"]
    assert "priya" in block["content"]
    assert "issue_refund" in block["content"]
    events = await read_events(tmp_path, RUN)
    assert of_type(events, ToolStarted) == []
    (decision,) = of_type(events, Decision)
    assert decision.approved is False


async def test_deciding_twice_or_an_unknown_call_is_refused(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel(
        [
            [
                use("toolu_a", "issue_refund", {"order": "a"}),
                use("toolu_b", "issue_refund", {"order": "b"}),
            ],
            "finished",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=refund_tools(ran)) as sup:
        await sup.start(RUN, "refund a and b")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        assert (await sup.inspect(RUN)).pending == ("toolu_a", "toolu_b")

        with pytest.raises(RunStateError, match="toolu_zz"):
            await sup.decide(RUN, "toolu_zz", approved=True, by="priya")

        await sup.decide(RUN, "toolu_a", approved=True, by="priya")
        await wait_for(sup, RUN, RunStatus.WAITING_FOR_APPROVAL)
        view = await sup.inspect(RUN)
        assert view.pending == ("toolu_b",)
        assert ran == ["a"]  # approved calls run without waiting for the others

        with pytest.raises(RunStateError):
            await sup.decide(RUN, "toolu_a", approved=False, by="sam")
        await sup.decide(RUN, "toolu_b", approved=False, by="sam", note="no")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        with pytest.raises(RunStateError):
            await sup.decide(RUN, "toolu_b", approved=True, by="sam")

    assert ran == ["a"]
    events = await read_events(tmp_path, RUN)
    assert [(d.call_id, d.approved, d.by) for d in of_type(events, Decision)] == [
        ("toolu_a", True, "priya"),
        ("toolu_b", False, "sam"),
    ]
    assert model.calls == 2


async def test_deciding_a_call_of_a_tool_without_approval_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool
    async def charge(amount: int) -> str:
        """Charge a card."""
        return "charged"

    model = tether.ScriptedModel([[use("toolu_c", "charge", {"amount": 1})], "ok"])
    await craft_dangling(
        tmp_path, RUN, model=model, tools=tools, block=use("toolu_c", "charge", {"amount": 1})
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        with pytest.raises(RunStateError, match="is escalated; answer it with resolve"):
            await sup.decide(RUN, "toolu_c", approved=True, by="priya")


async def test_a_parked_run_waits_across_processes_and_is_not_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    ran: list[str] = []
    tools = refund_tools(ran)
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=tools) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    before = len(await read_events(tmp_path, RUN))

    model = refund_model()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        assert (await sup.inspect(RUN)).pending == (CALL,)
        assert len(await read_events(tmp_path, RUN)) == before  # the sweep appended nothing
        await sup.decide(RUN, CALL, approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ran == ["o-1"]
    assert model.calls == 1
    assert view.restarts == 0
    assert view.final_text == "finished"


async def test_an_approval_then_a_signal_while_no_process_holds_the_run_is_not_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    """Approved, then sent a signal, both by the verbs while the run was parked: the drive
    that takes it up looks past the signal to the approval, so nothing is charged (with no
    restart allowed, it would have been parked as a crash loop)."""
    ran: list[str] = []
    tools = refund_tools(ran)
    no_restarts = tether.Budgets(max_restarts=0)
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=tools) as sup:
        await sup.start(RUN, "refund o-1", budgets=no_restarts)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    async with tether.FileStore(tmp_path) as store:  # as `tether approve` and `tether signal`
        await operate.decide(store, RUN, CALL, approved=True, by="priya")
        await operate.signal(store, RUN, "customer.replied", {"text": "thanks"}, signal_id="m1")
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    assert ran == ["o-1"]
    assert view.restarts == 0
    assert of_type(await read_events(tmp_path, RUN), Resumed) == []


def jumping(
    root: pathlib.Path, model: tether.ScriptedModel, tools: tether.ToolRegistry
) -> Supervisor:
    """A supervisor whose clock jumps to the next deadline whenever everything waits."""
    return Supervisor(
        tether.FileStore(root), model=model, tools=tools, clock=VirtualClock(autojump_threshold=0)
    )


async def test_an_unanswered_approval_is_rejected_at_its_deadline(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = refund_model()
    tools = refund_tools(ran, approval_timeout=0.2)
    async with jumping(tmp_path, model, tools) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await wait_for(sup, RUN, RunStatus.DONE, timeout=5)
        view = await sup.inspect(RUN)

    assert ran == []
    events = await read_events(tmp_path, RUN)
    (decision,) = of_type(events, Decision)
    assert (decision.approved, decision.by) == (False, "tether")
    assert "deadline" in decision.note
    assert decision.at - events[1].at >= 0.2  # never early
    block = results_by_id(view.messages)[CALL]
    assert block["is_error"] is True
    assert "rejected by tether" in block["content"]
    assert "deadline" in block["content"]
    assert result_of(events, CALL).seq == decision.seq + 1
    assert view.final_text == "finished"
    assert model.calls == 2


async def test_an_unanswered_approval_can_escalate_at_its_deadline(
    tmp_path: pathlib.Path,
) -> None:
    ran: list[str] = []
    model = refund_model()
    tools = refund_tools(ran, approval_timeout=0.2, on_approval_timeout="escalate")
    async with jumping(tmp_path, model, tools) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await wait_for(sup, RUN, RunStatus.NEEDS_ATTENTION, timeout=5)
        view = await sup.inspect(RUN)
        assert "approval deadline passed" in view.reason
        assert view.pending == (CALL,)

        await sup.resolve(RUN, CALL, outcome="failed", by="priya", note="too late")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ran == []
    events = await read_events(tmp_path, RUN)
    (escalated,) = of_type(events, Escalated)
    assert escalated.reason == "approval deadline passed"
    assert of_type(events, Decision) == []
    assert "too late" in results_by_id(view.messages)[CALL]["content"]


async def test_the_deadline_fires_in_a_later_process(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=0.3)
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=refund_model(), tools=tools, clock=clock
    ) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    model = refund_model()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools, clock=clock) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        clock.advance(0.3)  # the deadline comes while this later process runs
        await wait_for(sup, RUN, RunStatus.DONE, timeout=5)
    (decision,) = of_type(await read_events(tmp_path, RUN), Decision)
    assert decision.by == "tether"
    assert ran == []
    assert model.calls == 1

    # A deadline that passed while no process was running is applied as soon as one starts.
    ran2: list[str] = []
    tools2 = refund_tools(ran2, approval_timeout=0.1)
    root2 = tmp_path / "second"
    async with Supervisor(
        tether.FileStore(root2), model=refund_model(), tools=tools2, clock=clock
    ) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    clock.advance(0.15)  # with no process running
    async with Supervisor(
        tether.FileStore(root2), model=refund_model(), tools=tools2, clock=clock
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert ran2 == []


async def test_an_approval_deadline_is_not_a_restart(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=0.2)
    clock = VirtualClock(autojump_threshold=0)
    async with Supervisor(
        tether.FileStore(tmp_path), model=refund_model(), tools=tools, clock=clock
    ) as sup:
        await sup.start(RUN, "refund o-1", budgets=tether.Budgets(max_restarts=0))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        with anyio.fail_after(5):
            while not (view := await sup.inspect(RUN)).status.final:
                await anyio.sleep(0.02)
    assert of_type(await read_events(tmp_path, RUN), Resumed) == []
    assert view.status is RunStatus.DONE, view.reason
    assert ran == []


async def test_deciding_an_escalated_call_is_refused(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=0.1, on_approval_timeout="escalate")
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=tools) as sup:
        await sup.start(RUN, "refund o-1")
        await wait_for(sup, RUN, RunStatus.NEEDS_ATTENTION, timeout=5)
        # The call waits for a resolution now, not for approval: a decision would be ignored.
        with pytest.raises(RunStateError):
            await sup.decide(RUN, CALL, approved=True, by="priya")


async def refund_v1(order: str) -> str:
    """Refund an order."""
    return f"v1 refunded {order}"


async def refund_v2(order: str) -> str:
    """Refund an order."""
    return f"v2 refunded {order}"


async def test_decide_uses_the_pinned_version_of_the_tool(tmp_path: pathlib.Path) -> None:
    old = tether.ToolRegistry()
    old.register(refund_v1, name="issue_refund", version="1", approval=True)
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=old) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    # A new deployment: version 2 no longer needs approval; the run still pins version 1.
    new = tether.ToolRegistry()
    new.register(refund_v1, name="issue_refund", version="1", approval=True)
    new.register(refund_v2, name="issue_refund", version="2")
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=new) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide(RUN, CALL, approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    assert results_by_id(view.messages)[CALL]["content"] == "v1 refunded o-1"


async def test_a_recorded_rejection_holds_even_for_a_tool_without_approval(
    tmp_path: pathlib.Path,
) -> None:
    # A person can record a rejection from outside the application (``tether reject``) while
    # the call was never started; the tool must not run.
    from tether.journal import ModelResponse, RunStarted

    from ._helpers import craft, manifest_for

    ran: list[str] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(order: str) -> str:
        """Look an order up."""
        ran.append(order)
        return "found"

    model = tether.ScriptedModel([[use(CALL, "lookup", {"order": "o-1"})], "finished"])
    started = RunStarted(
        run_id=RUN, manifest=manifest_for(model, tools), messages=[{"role": "user", "content": "x"}]
    )
    block = use(CALL, "lookup", {"order": "o-1"})
    response = ModelResponse(message={"role": "assistant", "content": [block]})
    rejected = Decision(call_id=CALL, approved=False, by="priya", note="not this one")
    await craft(tmp_path, RUN, [started, response, rejected])
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    assert ran == []
    result = results_by_id(view.messages)[CALL]
    assert result["is_error"]
    assert "not this one" in str(result["content"])


async def test_an_approval_after_the_approval_deadline_does_not_run_the_call(
    tmp_path: pathlib.Path,
) -> None:
    """Nobody swept the parked run when its deadline passed: the late approval is refused, and
    an approval that reached the journal after the deadline anyway (crafted here, as a race
    would leave it) is not acted on either: the deadline wins."""
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=0.2)
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=refund_model(), tools=tools, clock=clock
    ) as sup:
        await sup.start(RUN, "refund o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    clock.advance(0.3)
    async with Supervisor(
        tether.FileStore(tmp_path), model=refund_model(), tools=tools, resume=False, clock=clock
    ) as sup:
        with pytest.raises(RunStateError, match="approval deadline of call 'toolu_03'"):
            await sup.decide(RUN, CALL, approved=True, by="priya")
    async with tether.FileStore(tmp_path) as store, await store.open(RUN) as journal:
        await journal.append([Decision(call_id=CALL, approved=True, by="priya", at=clock.time())])
    async with Supervisor(
        tether.FileStore(tmp_path), model=refund_model(), tools=tools, clock=clock
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert ran == []
    events = await read_events(tmp_path, RUN)
    result = result_of(events, CALL)
    assert not result.ok
    assert "no decision before the approval deadline" in result.content
    assert of_type(events, ToolStarted) == []


def test_the_cli_refuses_an_approval_after_its_deadline(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=0.2)

    async def park() -> None:
        # Parked an hour ago (the command line reads the real clock), with a 0.2 s deadline.
        clock = VirtualClock(start=time.time() - 3600)
        async with Supervisor(
            tether.FileStore(tmp_path), model=refund_model(), tools=tools, clock=clock
        ) as sup:
            await sup.start(RUN, "refund o-1")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    anyio.run(park)
    approve = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "approve",
            "--root",
            str(tmp_path),
            RUN,
            CALL,
            "--by",
            "x",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert approve.returncode == 1
    assert "the approval deadline of call 'toolu_03' (issue_refund) passed" in approve.stderr
    assert "the deadline's outcome stands" in approve.stderr


async def test_parked_runs_with_deadlines_hold_no_task_of_their_own(
    tmp_path: pathlib.Path,
) -> None:
    """One timer serves every deadline: 200 parked runs, each with an approval deadline."""
    ran: list[str] = []
    tools = refund_tools(ran, approval_timeout=3600)
    async with Supervisor(tether.FileStore(tmp_path), model=refund_model(), tools=tools) as sup:
        before = len(asyncio.all_tasks())
        for n in range(200):
            await sup.start(f"run-{n}", "refund o-1")
        for n in range(200):
            assert await sup.wait(f"run-{n}", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await anyio.sleep(0.05)
        assert len(asyncio.all_tasks()) <= before + 1
        assert len(sup._timers) == 200
