"""Why a run is taken up again, as its journal tells: by the last record a process driving it
wrote, whatever was written for it from outside since (a signal, a person's answer)."""

from __future__ import annotations

import pathlib

import anyio
import msgspec

import tether
from tether.journal import AnyEvent, Signal, Suspended, ToolStarted
from tether.supervisor import Supervisor
from tether.supervisor._resume import cause_of, was_interrupted
from tether.supervisor._state import fold

from ._helpers import WAIT, gated_tools, lookup_and_send_model, read_events


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


async def test_a_signal_after_a_crash_mid_call_leaves_it_a_crash(tmp_path: pathlib.Path) -> None:
    state = fold(_with_signal(await _journal_mid_call(tmp_path)))
    assert was_interrupted(state, state.last.at if state.last else 0.0)
    cause = cause_of(state)
    assert (cause.cause, cause.charged) == ("crash", True)


async def test_a_signal_after_a_graceful_stop_leaves_it_a_shutdown(
    tmp_path: pathlib.Path,
) -> None:
    gate = anyio.Event()
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=lookup_and_send_model(),
        tools=gated_tools([], gate),
        drain_timeout=0.1,
    ) as sup:
        await sup.start("run-1", "go")
        await _until_a_call_started(tmp_path)
    gate.set()
    events = await read_events(tmp_path, "run-1")
    assert isinstance(events[-1], Suspended)  # stopped while the lookup waited
    state = fold(_with_signal(events))
    cause = cause_of(state)
    assert (cause.cause, cause.charged) == ("shutdown", False)
