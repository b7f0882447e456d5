"""A run's status: one pure function of its folded state and the time, used by everything.

The supervisor (what to drive, what to wake), the loop (when to rest), the operator commands
(``tether runs``, ``show``, ``approve``...) and anything later all ask ``run_status``, so a run
is never ``waiting_for_approval`` in one place and ``running`` in another. It reads only the
journal: what a run waits for is decided by the contracts its manifest pinned (a tool's
approval flag and deadline), not by whichever application happens to read it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..journal import ToolFailed, ToolPin, ToolResult
from ._state import Call, RunState, RunStatus


@dataclass(frozen=True)
class Standing:
    """Where a run stands: its status, why, what it waits for, and when a timer should look.

    ``pending`` holds the ids of the calls a person has to answer; ``wake_at`` is the earliest
    wall-clock time at which the status changes by itself (an approval deadline, the run's
    deadline), if any.
    """

    status: RunStatus
    reason: str = ""
    pending: tuple[str, ...] = ()
    wake_at: float | None = None


_RUNNING = Standing(RunStatus.RUNNING)
"""Where every run with work to do stands: one shared (frozen) value, asked for before each
step of every run, rather than a new object the cyclic collector meets in flight."""


def run_status(state: RunState, now: float) -> Standing:
    """The status the journal implies at wall-clock time ``now``.

    ``running`` means there is work the runtime can do without a person: a model call, a tool
    call to start, retry, verify or record, an expired approval to act on. The manifest and
    budgets are checked by the loop when it acts, not here.
    """
    if state.finished is not None:
        return Standing(RunStatus(state.finished.status), state.finished.reason)
    deadline = run_deadline(state)
    if state.parked is not None:
        return Standing(RunStatus.NEEDS_ATTENTION, state.parked.reason, (), deadline)
    if not state.turn_open:
        return _RUNNING
    escalated: list[Call] = []
    waiting: list[Call] = []
    resting: list[tuple[Call, str]] = []  # waiting for a time or an event
    wake_at = deadline  # a parked run still fails at its deadline
    for call in state.calls.values():
        if call.done:
            continue
        if call.escalated:
            escalated.append(call)
            continue
        rest = world_wait(state, call, now)
        if rest is not None:
            what, until = rest
            resting.append((call, what))
            if until is not None:
                wake_at = until if wake_at is None else min(wake_at, until)
            continue
        until = approval_wait(state, call, now)
        if until is None:
            return _RUNNING
        waiting.append(call)
        if until != float("inf"):
            wake_at = until if wake_at is None else min(wake_at, until)
    # A status about another call still names the calls that wait for their service: the
    # person who answers it must know the run will not go on until those are back.
    meanwhile = "".join(
        f"; meanwhile {c.name} ({c.id}) {what}" for c, what in resting if c.unreached is not None
    )
    if escalated:
        reasons = "; ".join(
            f"{c.name} ({c.id}): {c.escalation.reason}" for c in escalated if c.escalation
        )
        return Standing(
            RunStatus.NEEDS_ATTENTION,
            reasons + meanwhile,
            tuple(c.id for c in escalated + waiting),
            wake_at,
        )
    if waiting:
        names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        return Standing(
            RunStatus.WAITING_FOR_APPROVAL,
            f"approval needed for {names}{meanwhile}",
            tuple(c.id for c in waiting),
            wake_at,
        )
    reasons = "; ".join(f"{c.name} ({c.id}) {what}" for c, what in resting)
    return Standing(RunStatus.SLEEPING, reasons, (), wake_at)


@dataclass(frozen=True)
class Ended:
    """A call's wait is over: ``result`` is the record that gives the call its result."""

    result: ToolResult


@dataclass(frozen=True)
class Waits:
    """A call still waits for the world: ``what`` in words, ``until`` when it ends by itself."""

    what: str
    until: float | None


def wait_at(state: RunState, call: Call, now: float) -> Ended | Waits | None:
    """Where the wait ``call``'s latest attempt ended in stands at ``now`` (``None``: the call
    does not wait). The one rule for "is this wait over, and with what result", used by the
    status (``world_wait``) and by the replay decision (``_replay``), so the two never disagree.

    A child run's wait ends when its end is recorded in the parent (its answer, or an error
    naming how it ended); an event's when a signal of that name is there (its payload, the
    signal taken), else at its timeout; a sleep at its time (the result the tool gave). A
    call whose service could not be reached waits for it until its next try
    (``service_wait``).
    """
    unreached = call.unreached
    if unreached is not None:
        return service_wait(call, unreached, now)
    wait = call.wait
    if wait is None:
        return None
    if wait.child is not None:
        child = str(wait.child.get("run_id"))
        ended = state.children.get(child)
        if ended is None:
            return Waits(f"waiting for child run {child}", None)
        if ended.status == "done":
            content = ended.final_text if ended.final_text is not None else "(no answer)"
            return Ended(ToolResult(call_id=call.id, ok=True, content=content))
        text = f"child run {ended.child} ended {ended.status}" + (
            f": {ended.reason}" if ended.reason else ""
        )
        return Ended(ToolResult(call_id=call.id, ok=False, content=text))
    if wait.event is not None:
        signal = state.signal_for(wait.event)
        if signal is not None:
            return Ended(
                ToolResult(
                    call_id=call.id, ok=True, content=signal.payload, signal_id=signal.signal_id
                )
            )
    if wait.until is not None and now >= wait.until:
        return Ended(ToolResult(call_id=call.id, ok=wait.ok, content=wait.result))
    if wait.event is None:
        return Waits(f"sleeping until {_when(wait.until)}", wait.until)
    timeout = "" if wait.until is None else f" (until {_when(wait.until)})"
    return Waits(f"waiting for event {wait.event}{timeout}", wait.until)


def service_wait(call: Call, failed: ToolFailed, now: float) -> Waits | None:
    """How ``call``, whose latest attempt could not reach its service (``failed``, nothing
    sent), waits at ``now``: until its next try, which is when the replay decision runs it
    again (``None`` once that time has come). The run rests meanwhile with no task, as for a
    sleep, and says why in every view: the tool's own words for what it could not reach."""
    if failed.retry_at is None or now >= failed.retry_at:
        return None
    tries = "once" if call.unsent == 1 else f"{call.unsent} times in a row"
    return Waits(
        f"waiting for its service: {failed.error}; nothing was sent (tried {tries}); next "
        f"try at {_when(failed.retry_at)}; resolve it to give the model a result, or cancel "
        "the run",
        failed.retry_at,
    )


def world_wait(state: RunState, call: Call, now: float) -> tuple[str, float | None] | None:
    """What ``call`` waits for in the world and until when (``"sleeping until ..."``,
    ``"waiting for event X"``), or ``None`` if it does not wait for it (or no longer: its time
    came, or a signal for it is there, and the runtime records its result): ``wait_at``."""
    rest = wait_at(state, call, now)
    return (rest.what, rest.until) if isinstance(rest, Waits) else None


def _when(at: float | None) -> str:
    if at is None:
        return "forever"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def approval_wait(state: RunState, call: Call, now: float) -> float | None:
    """Until when ``call`` waits for a person's approval (``inf``: no deadline), or ``None``
    if it does not wait: its tool needs no approval, it was decided or started, or its
    deadline passed at ``now`` (the runtime then acts on the timeout)."""
    if call.done or call.attempts or call.decision is not None:
        return None
    if call.escalation is not None or call.resolution is not None:
        return None
    pin = pinned_tool(state, call.name)
    if pin is None or not pin.approval:
        return None
    if pin.approval_timeout is None:
        return float("inf")
    deadline = call.started_at + pin.approval_timeout
    return deadline if now < deadline else None


def approval_deadline(state: RunState, call: Call) -> float | None:
    """When ``call``'s approval wait ends by the contract its run pinned, if it has a deadline."""
    pin = pinned_tool(state, call.name)
    if pin is None or not pin.approval or pin.approval_timeout is None:
        return None
    return call.started_at + pin.approval_timeout


def pinned_tool(state: RunState, name: str) -> ToolPin | None:
    """The contract the run pinned for tool ``name``, if it pinned one."""
    if state.started is None:
        return None
    for pin in state.manifest.tools:
        if pin.name == name:
            return pin
    return None


def run_deadline(state: RunState) -> float | None:
    """When the run's ``deadline_s`` budget runs out (wall clock), if it has one."""
    if state.started is None or state.budgets.deadline_s is None:
        return None
    return state.started.at + state.budgets.deadline_s
