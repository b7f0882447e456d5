"""Why a run is taken up again, as its journal tells: by the last record a process driving it
wrote, whatever was written for it from outside since (a signal, a person's answer); and what
a cancellation records of the calls a stopped process left in flight."""

from __future__ import annotations

import pathlib

import anyio
import msgspec

import tether
from tether import operate
from tether.journal import (
    AnyEvent,
    ModelResponse,
    Repinned,
    Resumed,
    RunFinished,
    RunStarted,
    Signal,
    Suspended,
    ToolFailed,
    ToolStarted,
)
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._resume import cause_of, was_interrupted
from tether.supervisor._state import fold

from ._helpers import (
    WAIT,
    craft,
    craft_dangling,
    gated_tools,
    lookup_and_send_model,
    manifest_for,
    of_type,
    read_events,
)


def _with_signal(events: list[AnyEvent]) -> list[AnyEvent]:
    signal = Signal(name="customer.replied", signal_id="m1", payload={"text": "hi"})
    return [*events, msgspec.structs.replace(signal, seq=len(events), at=events[-1].at)]


async def _journal_mid_call(root: pathlib.Path) -> list[AnyEvent]:
    """The journal of a run whose process is inside a tool call: what a crash there leaves."""
    gate = anyio.Event()
    async with Supervisor(
        tether.FileStore(root), model=lookup_and_send_model(), tools=gated_tools([], gate)
    ) as sup:
        try:
            await sup.start("run-1", "go")
            events = await _until_a_call_started(root)
        finally:
            gate.set()
    return events


async def _until_a_call_started(root: pathlib.Path) -> list[AnyEvent]:
    with anyio.fail_after(WAIT):
        while not isinstance((events := await read_events(root, "run-1"))[-1], ToolStarted):
            await anyio.sleep(0.01)
    return events


async def _stopped_mid_call(root: pathlib.Path) -> None:
    """A run whose supervisor stopped while a call ran, not waiting for it (a short drain):
    its journal ends with ``suspended``, the call in flight."""
    gate = anyio.Event()
    async with Supervisor(
        tether.FileStore(root),
        model=lookup_and_send_model(),
        tools=gated_tools([], gate),
        drain_timeout=0.1,
    ) as sup:
        await sup.start("run-1", "go")
        await _until_a_call_started(root)
    gate.set()


async def test_a_signal_after_a_crash_mid_call_leaves_it_a_crash(tmp_path: pathlib.Path) -> None:
    state = fold(_with_signal(await _journal_mid_call(tmp_path)))
    assert was_interrupted(state, state.last.at if state.last else 0.0)
    cause = cause_of(state)
    assert (cause.cause, cause.charged) == ("crash", True)


async def test_a_signal_after_a_graceful_stop_leaves_it_a_shutdown(
    tmp_path: pathlib.Path,
) -> None:
    await _stopped_mid_call(tmp_path)
    events = await read_events(tmp_path, "run-1")
    assert isinstance(events[-1], Suspended)  # stopped while the lookup waited
    state = fold(_with_signal(events))
    cause = cause_of(state)
    assert (cause.cause, cause.charged) == ("shutdown", False)


async def test_cancelling_a_run_no_process_holds_ends_the_call_it_left_in_flight(
    tmp_path: pathlib.Path,
) -> None:
    """Its process stopped inside a call (here a drain that did not wait for it; a kill leaves
    the same call in flight): the cancellation records that call's end, outcome unknown, in
    its own group, so the finished run's journal leaves no call in flight."""
    await _stopped_mid_call(tmp_path)
    before = await read_events(tmp_path, "run-1")
    assert fold(before).calls["toolu_1"].dangling
    async with tether.FileStore(tmp_path) as store:
        done = await operate.cancel(store, "run-1", reason="duplicate", by="priya")
    events = await read_events(tmp_path, "run-1")
    ended, finished = events[len(before) :]
    assert isinstance(ended, ToolFailed)
    assert (ended.call_id, ended.timed_out) == ("toolu_1", True)
    assert ended.error == (
        "interrupted: the run's process stopped while this call ran, and the run was "
        "cancelled before it was taken up again; whether it had its effect is unknown"
    )
    assert isinstance(finished, RunFinished)
    assert done.record.seq == finished.seq
    assert not any(c.dangling for c in fold(events).calls.values())


def _lookup_tools(*, changed: bool) -> tether.ToolRegistry:
    """``lookup``, and ``extra`` as v1 has it or as a compatible change of it (``changed``)."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(item: str) -> str:
        """Look an item up."""
        return "found"

    if changed:

        @tools.tool(policy="rerun", compatible=True, name="extra")
        async def extra_v2(item: str, channel: str = "x") -> str:
            """Something else."""
            return "ok"

    else:

        @tools.tool(policy="rerun", name="extra")
        async def extra_v1(item: str) -> str:
            """Something else."""
            return "ok"

    return tools


LOOKUP = tether.ScriptedModel.tool_use("toolu_1", "lookup", {"item": "a"})


async def test_a_compatible_takeover_after_a_crash_still_counts_the_crash(
    tmp_path: pathlib.Path,
) -> None:
    """The worker that takes the run up writes the takeover's ``repinned`` itself before it
    judges the interruption: its own record is no person's answer, so the crash is charged
    (and with no restart allowed, the run is parked, as without the takeover)."""
    await craft_dangling(
        tmp_path,
        "run-1",
        model=tether.ScriptedModel([[LOOKUP], "done"]),
        tools=_lookup_tools(changed=False),
        block=LOOKUP,
        budgets=tether.Budgets(max_restarts=0),
    )
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=tether.ScriptedModel([[LOOKUP], "done"]),
        tools=_lookup_tools(changed=True),
    ) as sup:
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    events = await read_events(tmp_path, "run-1")
    assert [(r.cause, r.charged) for r in of_type(events, Resumed)] == [("crash", True)]
    assert of_type(events, Repinned)  # the takeover was taken


async def test_a_cancellation_taken_in_as_a_crashed_run_is_resumed_ends_its_call(
    tmp_path: pathlib.Path,
) -> None:
    """Queued while a worker held the run, which then died in a call: the next drive takes
    the cancellation in as it resumes the run, and ends that call first (outcome unknown)."""
    tools = _lookup_tools(changed=False)
    model = tether.ScriptedModel([[LOOKUP], "done"])
    await craft_dangling(tmp_path, "run-1", model=model, tools=tools, block=LOOKUP)
    async with tether.FileStore(tmp_path) as store:
        await store.post("run-1", RunFinished(status="cancelled", reason="duplicate"))
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.CANCELLED
    events = await read_events(tmp_path, "run-1")
    assert not [c.id for c in fold(events).calls.values() if c.dangling]
    (ended,) = of_type(events, ToolFailed)
    assert (ended.call_id, ended.timed_out) == ("toolu_1", True)
    assert isinstance(events[-1], RunFinished)


async def test_a_decision_recorded_after_a_crash_mid_call_leaves_it_a_crash(
    tmp_path: pathlib.Path,
) -> None:
    """A turn of two calls: the lookup was running when its process died, the send waited
    for approval. The approval recorded since (the holder is gone, so the verb writes it)
    answers the send, not the lookup: the next drive is a restart after a crash, charged."""
    sent: list[str] = []
    tools = gated_tools(sent, anyio.Event())
    model = lookup_and_send_model()
    both = [
        tether.ScriptedModel.tool_use("toolu_1", "slow_lookup", {"item": "a"}),
        tether.ScriptedModel.tool_use("toolu_2", "send", {"text": "hi"}),
    ]
    started = RunStarted(
        run_id="run-1",
        manifest=manifest_for(model, tools),
        messages=[{"role": "user", "content": "go"}],
    )
    response = ModelResponse(message={"role": "assistant", "content": both})
    await craft(
        tmp_path, "run-1", [started, response, ToolStarted(call_id="toolu_1", name="slow_lookup")]
    )
    async with tether.FileStore(tmp_path) as store:
        done = await operate.decide(store, "run-1", "toolu_2", approved=True, by="priya")
    assert not done.queued
    state = fold(await read_events(tmp_path, "run-1"))
    assert was_interrupted(state, 0.0)
    cause = cause_of(state)
    assert (cause.cause, cause.charged) == ("crash", True)
