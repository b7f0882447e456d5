"""Taking a run up again: was it interrupted, why, and is it the latest of a crash loop; and
whether a drive that stops leaves a stop worth recording.

Only an interruption that is the run's own counts: its process died while it was active, or its
task raised. A graceful stop (``suspended``), a store that failed and a run that never took a
step are recorded too (``resumed``, with the cause), but not counted. Counted interruptions in a
row without progress past the run's limit park it for a person (docs/design.md invariant 9).
"""

from __future__ import annotations

import logging
import os

from ..journal import (
    Escalated,
    Event,
    Parked,
    Resumed,
    RunStarted,
    Suspended,
)
from ..journal._records import FIRST_DRIVE
from ._runtime import Interruption, Runtime
from ._state import Call, RunState, RunStatus
from ._status import run_status

log = logging.getLogger("tether.supervisor")


def resumed(
    run_id: str,
    state: RunState,
    rt: Runtime,
    prior: Interruption | None,
    *,
    taken_from: str = "",
) -> tuple[Resumed, list[Event]]:
    """The ``resumed`` record of a drive that takes interrupted run ``run_id`` up again (its cause:
    ``prior`` when this process saw it, else what the journal says), and the records that
    park the run when this interruption is the latest of a crash loop past its limit (else
    none)."""
    cause = prior or cause_of(state)
    record = Resumed(
        attempt=state.resumes + 1,
        host=rt.host,
        pid=os.getpid(),
        cause=cause.cause,
        charged=cause.charged,
        taken_from=taken_from,
    )
    limit = state.budgets.max_restarts
    limit = rt.max_restarts if limit is None else limit
    n = state.interruptions + cause.charged
    if n <= limit:
        return record, []
    log.error(
        "run %s: stopped %d times in a row without progress; parked for a person (%s)",
        run_id,
        n,
        cause.cause,
        extra={"run_id": run_id},
    )
    return record, crash_loop_records(state, n, limit, cause.cause)


def stopped_mid_work(state: RunState, now: float) -> bool:
    """Whether a drive that stops now leaves a stop worth recording (``suspended``): the run
    is unfinished, not at rest and not suspended already."""
    if state.finished is not None or state.started is None:
        return False
    if isinstance(state.last, Suspended):
        return False
    return run_status(state, now).status is RunStatus.RUNNING


def cause_of(state: RunState) -> Interruption:
    """How the last owner stopped, as far as the journal tells: by its own last record, the
    answers and signals written for the run since left out (a signal sent to a run that was
    created and not driven yet, or to one stopped gracefully, is no sign of a crash)."""
    if isinstance(state.last_own, Suspended):
        return Interruption("shutdown", charged=False)
    if isinstance(state.last_own, RunStarted):
        # It never took a step: created by one process and first driven by another, or its
        # creator died at once. Counted from the next interruption on.
        return Interruption(FIRST_DRIVE, charged=False)
    return Interruption("crash", charged=True)


def was_interrupted(state: RunState, now: float) -> bool:
    """Whether the last owner stopped mid-work, not at a rest or a person's answer (a
    decision, a resolution, a retry since its last own record, ``RunState.last_own``; a
    signal after it changes nothing). A call left in flight (started, nothing says how it
    ended, not escalated to a person) means mid-work whatever was answered since: a decision
    for another call of the turn, say. A run the runtime parked (for its contract, say) and
    that was answered since (a repin) was at a rest too."""
    if any(c.dangling and not c.escalated for c in state.calls.values()):
        return True
    if state.answered:
        return False
    if isinstance(state.last_own, Parked) and state.last is not state.last_own:
        return False
    open_calls = [c for c in state.calls.values() if not c.done]
    if open_calls and all(_parked(state, c) for c in open_calls):
        # Parked for a person or for the world, and woken since: an approval deadline, a
        # sleep's time, a signal, a child run's end, an unreachable service's next try. Its
        # last owner stopped at a rest.
        return False
    return run_status(state, now).status is RunStatus.RUNNING


def _parked(state: RunState, call: Call) -> bool:
    return call.wait is not None or call.unreached is not None or _parked_for_approval(state, call)


def _parked_for_approval(state: RunState, call: Call) -> bool:
    return (
        pinned_approval(state, call.name)
        and call.attempts == 0
        and call.decision is None
        and call.escalation is None
    )


def pinned_approval(state: RunState, name: str) -> bool:
    return any(p.name == name and p.approval for p in state.manifest.tools)


def crash_loop_records(state: RunState, n: int, limit: int, cause: str) -> list[Event]:
    """What parks a run whose ``n``-th interruption in a row passed ``limit``: an escalation of
    each call that was running (a person resolves it), or ``parked`` when none was."""
    dangling = [c for c in state.calls.values() if c.dangling]
    if dangling:
        return [
            Escalated(
                call_id=c.id,
                reason=f"the run stopped {n} times in a row (limit {limit}) while "
                f"{c.name} was running (attempt {c.attempts}); last: {cause}; resolve "
                "it as succeeded, retry or failed, or cancel the run",
            )
            for c in dangling
        ]
    doing = "running its tools" if state.turn_open else "asking the model"
    return [
        Parked(
            reason=f"the run stopped {n} times in a row without progress (limit "
            f"{limit}) while {doing}; last: {cause}; fix the cause, then retry the run",
            cause="crash_loop",
        )
    ]
