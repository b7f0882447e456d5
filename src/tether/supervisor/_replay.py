"""The replay decision: what to do next with one tool call of the model's latest turn.

``next_step`` is a pure function of what the journal says about the call, the tool's
registered contract and the time. The loop asks it for every open call and only carries the
answers out, so "what happens to a dangling call" has one answer, read here:

==============================================  ==============================================
the call                                        next step
==============================================  ==============================================
names no tool the run pinned                    ``Record`` an error result the model sees
has arguments that do not match the schema      ``Record`` an error result
was resolved by a person                        ``succeeded``/``failed``: ``Record`` that;
                                                ``retry``: ``Run`` it once more
was rejected                                    ``Record`` the rejection (with its note)
needs approval, none yet, before its deadline   ``WaitForPerson``
needs approval, deadline passed (or the         ``Record`` a rejection by ``tether``, or
approval came after it)                         ``Escalate`` (``on_approval_timeout``)
never started (approved, or needs none)         ``Run`` attempt 1
started, no outcome (its process stopped)       by policy: ``rerun``/``idempotency_key``:
                                                ``Run`` again; ``verify``: ``Verify``;
                                                ``escalate``: ``Escalate``
last attempt could not reach the tool's         ``Rest`` until its ``retry_at`` (backoff, ~1 s
service (``ToolUnavailableError``: nothing      doubling to 60 s), then ``Run`` again: without
was sent)                                       limit, whatever the policy; not a retry
last attempt raised an error in ``retry_on``    ``Run`` again at its ``retry_at``
                                                (``RetryAt`` until then); no retries left:
                                                ``Record`` the error
last attempt ended in a wait (a sleep, an       ``Rest`` until its time or its event; then
event: ``sleep_until``, ``wait_for``)           ``Record`` its result (the signal's payload,
                                                or the wait's own result)
last attempt timed out, or raised               as a dangling call, but only while retries
``OutcomeUnknownError`` (outcome unknown)       are left; none left: ``Verify`` once (a
                                                ``verify`` tool), else ``Escalate`` or
                                                ``Record`` the error
==============================================  ==============================================
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

from .._errors import ToolArgumentsError
from ..journal import Decision, Escalated, Event, ToolResult
from ..tools import ApprovalTimeout, ReplayPolicy, ToolSpec
from ._state import Call, RunState
from ._status import Ended, approval_deadline, approval_wait, pinned_tool, wait_at

SYSTEM_ACTOR = "tether"
"""Who decides when nobody did in time (``decision.by`` of an expired approval)."""


@dataclass(frozen=True)
class Run:
    """Start attempt ``attempt`` of the call (a ``tool_started`` record first)."""

    attempt: int


@dataclass(frozen=True)
class Verify:
    """Ask the tool's ``verify`` function whether the last attempt landed. A result is
    recorded as the call's; ``None`` runs it again (``then_run``) or records ``otherwise``."""

    then_run: bool = True
    otherwise: str = ""


@dataclass(frozen=True)
class Record:
    """Append ``records`` (the call's result, with a decision where one is implied)."""

    records: tuple[Event, ...]


@dataclass(frozen=True)
class Escalate:
    """Park the call for a person (``needs_attention``) with ``reason``."""

    reason: str


@dataclass(frozen=True)
class WaitForPerson:
    """The call waits for an approval (nothing to do until a person answers or its deadline)."""


@dataclass(frozen=True)
class Rest:
    """The call waits for a time, an event, or its unreachable service's next try (its run
    rests until then)."""


@dataclass(frozen=True)
class RetryAt:
    """Run the call again (``attempt``) once the wall clock reaches ``when``."""

    when: float
    attempt: int


Step = Run | Verify | Record | Escalate | WaitForPerson | Rest | RetryAt

SAFE_TO_REPEAT = (ReplayPolicy.RERUN, ReplayPolicy.IDEMPOTENCY_KEY)
"""Policies under which running a call again is harmless."""


@dataclass
class Turn:
    """What ``plan_turn`` found to do with the open calls of the model's latest turn.

    Attributes:
        records: to append first (the run then decides again on what they changed).
        runs: calls to run or verify now, with their tool versions.
        later: calls to run again at a retry time.
    """

    records: list[Event] = field(default_factory=list)
    runs: list[tuple[Call, ToolSpec, Run | Verify]] = field(default_factory=list)
    later: list[tuple[Call, ToolSpec, RetryAt]] = field(default_factory=list)


def plan_turn(
    state: RunState,
    spec_of: Callable[[str], ToolSpec | None],
    prestarted: Container[str],
    now: float,
    *,
    taken_from: str = "",
) -> Turn:
    """``next_step`` for every open call of the turn, gathered: ``spec_of`` gives the pinned
    tool version of a name; the calls in ``prestarted`` were started in the answer's own
    group, checked then, and run as they are. A signal goes to one call of the turn at most.

    ``taken_from`` names the worker whose expired lease this drive took the run over from
    (else the run's own ``taken_from``): an escalation of a call that dangles says so, since
    that worker may only be paused and its call still running."""
    taken_from = taken_from or state.taken_from
    turn = Turn()
    taken: set[str] = set()  # signals given to a call in this round: one call each
    for call in list(state.calls.values()):
        if call.done or call.escalated:
            continue
        spec = spec_of(call.name)
        if spec is not None and call.id in prestarted:
            turn.runs.append((call, spec, Run(call.attempts)))  # checked when its start went out
            continue
        step = next_step(state, call, spec, now)
        if isinstance(step, Record):
            signal = next((r.signal_id for r in step.records if isinstance(r, ToolResult)), "")
            if signal and signal in taken:
                continue  # another call of the turn takes it; this one looks again
            taken.add(signal)
            turn.records.extend(step.records)
        elif isinstance(step, Escalate):
            reason = step.reason
            if taken_from and call.dangling:
                reason += (
                    f"; the run was taken over from {taken_from}: if that process may "
                    "only be paused (not gone), its call may still finish, so make sure it is "
                    "gone before answering"
                )
            turn.records.append(escalation(call.id, reason))
        elif isinstance(step, RetryAt):
            assert spec is not None
            turn.later.append((call, spec, step))
        elif isinstance(step, (Run, Verify)):
            assert spec is not None
            turn.runs.append((call, spec, step))
        else:
            assert isinstance(step, WaitForPerson | Rest)
    return turn


def next_step(state: RunState, call: Call, spec: ToolSpec | None, now: float) -> Step:
    """What to do next with ``call`` (not done), whose pinned tool version is ``spec``.

    ``spec`` is ``None`` when the run pinned no tool of that name or this process lacks the
    pinned version (a resumed run with a missing tool stops earlier, on its manifest).
    """
    if spec is None:
        return _error(call, f"unknown tool {call.name!r}")
    try:
        spec.validate(call.input)
    except ToolArgumentsError as exc:
        return _error(call, f"invalid arguments for {call.name}: {exc.reason}")
    res = call.resolution
    if res is not None:
        if res.outcome == "succeeded":
            return Record((ToolResult(call_id=call.id, ok=True, content=res.result),))
        if res.outcome == "failed":
            note = res.note or f"marked failed by {res.by or 'a person'}"
            content = res.result if res.result is not None else note
            return Record((ToolResult(call_id=call.id, ok=False, content=content),))
        if call.attempts == call.attempts_at_resolution:  # "retry": run it once more
            return Run(call.attempts + 1)
        return _after_attempt(state, call, spec, now)  # the retried attempt ended too
    decision = call.decision
    if decision is not None and not decision.approved:
        return Record((_rejected(call, decision.by, decision.note),))
    if call.attempts == 0 and _needs_approval(state, call):
        if approval_wait(state, call, now) is not None:
            return WaitForPerson()
        deadline = approval_deadline(state, call)
        if decision is None or (deadline is not None and decision.at >= deadline):
            return _approval_expired(call, spec, deadline)  # the deadline wins over late ones
    if call.attempts == 0:
        return Run(1)
    return _after_attempt(state, call, spec, now)


def _after_attempt(state: RunState, call: Call, spec: ToolSpec, now: float) -> Step:
    """The call was started at least once: what its latest attempt's ending asks for."""
    rest = wait_at(state, call, now)  # (the status reads the same rule)
    if isinstance(rest, Ended):
        return Record((rest.result,))
    if rest is not None:
        return Rest()
    failed = call.last_attempt_failed
    if failed is None:  # started, no outcome: the process stopped while it ran
        return _unknown_outcome(
            call,
            spec,
            f"outcome unknown: {call.name} was started (attempt {call.attempts}) but its "
            "result was never recorded",
        )
    if failed.unsent:  # its service was down and its rest is over: nothing to repeat
        return Run(call.attempts + 1)
    retries_left = call.failures <= spec.retries
    if not failed.timed_out:  # an error the tool declared worth retrying
        if not retries_left:
            return _error(call, f"{failed.error} (after {call.failures} attempts)")
        return _at(failed.retry_at, now, call.attempts + 1)
    reason = (
        f"{call.name} attempt {failed.attempt} ended without a result ({failed.error}); "
        "outcome unknown"
    )
    if retries_left:
        step = _unknown_outcome(call, spec, reason)
        if isinstance(step, Run):
            return _at(failed.retry_at, now, step.attempt)
        return step
    if spec.policy is ReplayPolicy.VERIFY:
        return Verify(then_run=False, otherwise=f"{failed.error} (after {call.failures} attempts)")
    if spec.policy is ReplayPolicy.ESCALATE:
        return Escalate(f"{reason}; resolve it as succeeded, retry or failed")
    return _error(call, f"{failed.error} (after {call.failures} attempts)")


def _unknown_outcome(call: Call, spec: ToolSpec, reason: str) -> Step:
    """The tool's policy for an attempt whose outcome is unknown."""
    if spec.policy in SAFE_TO_REPEAT:
        return Run(call.attempts + 1)
    if spec.policy is ReplayPolicy.VERIFY:
        return Verify()
    return Escalate(f"{reason}; resolve it as succeeded, retry or failed")


def _approval_expired(call: Call, spec: ToolSpec, deadline: float | None) -> Step:
    if spec.on_approval_timeout is ApprovalTimeout.ESCALATE:
        return Escalate("approval deadline passed")
    waited = 0.0 if deadline is None else deadline - call.started_at
    note = f"no decision before the approval deadline ({waited:g} s)"
    return Record(
        (
            Decision(call_id=call.id, approved=False, by=SYSTEM_ACTOR, note=note),
            _rejected(call, SYSTEM_ACTOR, note),
        )
    )


def _needs_approval(state: RunState, call: Call) -> bool:
    """Approval is part of the contract the run pinned (as ``run_status`` reads it)."""
    pin = pinned_tool(state, call.name)
    return pin is not None and pin.approval


def _at(when: float | None, now: float, attempt: int) -> Step:
    if when is not None and now < when:
        return RetryAt(when, attempt)
    return Run(attempt)


def _error(call: Call, message: str) -> Record:
    return Record((ToolResult(call_id=call.id, ok=False, content=message),))


def _rejected(call: Call, by: str, note: str) -> ToolResult:
    text = f"{call.name} was rejected by {by}" + (f": {note}" if note else "")
    return ToolResult(call_id=call.id, ok=False, content=text)


def escalation(call_id: str, reason: str) -> Escalated:
    """The record of an ``Escalate`` step."""
    return Escalated(call_id=call_id, reason=reason)
