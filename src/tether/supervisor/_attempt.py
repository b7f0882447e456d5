"""One attempt of a tool call and how it ended: a result, or a failure worth another try.

Whatever the tool raises is that call's outcome, ``SystemExit``, ``KeyboardInterrupt`` and a
stray ``CancelledError`` included: one poisoned call never ends the process and the other
runs in it. Only the run's own cancellation propagates.

Two endings are not results. A timeout and ``OutcomeUnknownError`` (a tool that lost its
connection mid-call) leave the outcome unknown: a ``tool_failed`` record with ``timed_out``,
which the replay decision treats like a call whose process died, under the tool's policy.
``timed_out`` is the field an older reader already takes as "outcome unknown", so such a
journal never reads to it as a failure that is safe to run again. An exception in the tool's
``retry_on`` is a known failure: ``tool_failed`` without ``timed_out``.

``ToolUnavailableError`` bound to this attempt (its ``attempt`` is this attempt's context:
the tool's service could not be reached, nothing was sent) is known to have had no effect,
from any tool, in ``retry_on`` or not: ``tool_failed`` with ``unsent``, its next try after
a backoff of its own (about 1 s doubling to 60 s, ``SERVICE_RETRY``, jitter included). The
run rests until then and tries again for as long as the service is down: an outage is not the
run's doing (docs/design.md invariant 9).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Container
from typing import Any

import anyio

from .._backoff import SERVICE_RETRY, TOOL_RETRY
from .._errors import OutcomeUnknownError, ToolUnavailableError
from ..journal import MAX_RUN_ID_LEN as MAX_RUN_ID
from ..journal import Event, ToolFailed, ToolResult, Waiting
from ..tools import ContentBlocks, ToolContext, ToolSpec, Wait
from ._clock import Clock, within
from ._state import Call, RunState

_CHILD_PART = re.compile(r"[A-Za-z0-9._-]+")


async def attempt(
    call: Call,
    spec: ToolSpec,
    ctx: ToolContext,
    *,
    clock: Clock,
    jitter: Callable[[], float],
) -> Event:
    """Run one attempt (``ctx.attempt``) of ``call`` and return the record of how it ended.

    A timeout (``spec.timeout``, on ``clock``), ``OutcomeUnknownError``,
    ``ToolUnavailableError`` bound to ``ctx`` (``unsent``) and an exception in
    ``spec.retry_on`` give
    ``tool_failed`` (what comes next is the call's replay decision);
    anything else the tool raises is an error result. A wait the tool asks for with a
    duration (``sleep_for``, a ``wait_for`` timeout) is fixed in ``clock``'s time here.

    On cancellation (the run's own): propagates; the attempt's outcome stays unknown.
    """
    try:
        if spec.timeout is None:  # no cancel scope to pay for (most tools)
            timed_out, content = False, await spec.invoke(call.input, ctx)
        else:
            timed_out, content = await within(
                clock, spec.timeout, lambda: spec.invoke(call.input, ctx)
            )
        if timed_out:
            error = f"timed out after {spec.timeout:g} s"
            return failed(call, spec, ctx, error, timed_out=True, clock=clock, jitter=jitter)
        return ok_result(call, content, ctx.attempt, ctx.run_id, now=clock.time())
    except anyio.get_cancelled_exc_class():
        if cancelled_from_outside():
            raise
        return error_result(call, "the tool raised CancelledError (nothing cancelled it)")
    except OutcomeUnknownError as exc:  # it may have happened: the policy decides, as after a crash
        return failed(call, spec, ctx, exc.reason, timed_out=True, clock=clock, jitter=jitter)
    except ToolUnavailableError as exc:
        if exc.attempt == ctx:  # nothing of this attempt was sent: wait for the service
            return unsent(call, ctx, str(exc), clock=clock, jitter=jitter)
        # Not bound to this attempt (one the tool's own code made, after an effect maybe):
        # no proof that nothing happened, so it is an exception like any other.
        return raised(call, spec, ctx, exc, clock=clock, jitter=jitter)
    except BaseException as exc:  # the model hears what went wrong, as an error result
        return raised(call, spec, ctx, exc, clock=clock, jitter=jitter)


def raised(
    call: Call,
    spec: ToolSpec,
    ctx: ToolContext,
    exc: BaseException,
    *,
    clock: Clock,
    jitter: Callable[[], float],
) -> Event:
    """How an attempt that raised ``exc`` ended: a failure to retry if ``exc`` is in the
    tool's ``retry_on``, else the call's error result (the model hears what went wrong)."""
    error = f"{type(exc).__name__}: {exc}"
    if spec.retry_on and isinstance(exc, spec.retry_on):
        return failed(call, spec, ctx, error, timed_out=False, clock=clock, jitter=jitter)
    return error_result(call, error)


def failed(
    call: Call,
    spec: ToolSpec,
    ctx: ToolContext,
    error: str,
    *,
    timed_out: bool,
    clock: Clock,
    jitter: Callable[[], float],
) -> ToolFailed:
    """The ``tool_failed`` record of an attempt, with when the next may go (backoff)."""
    tries = call.failures + 1
    delay = TOOL_RETRY.delay(tries, jitter) if tries <= spec.retries else 0.0
    return ToolFailed(
        call_id=call.id,
        attempt=ctx.attempt,
        error=error,
        timed_out=timed_out,
        retry_at=clock.time() + delay,
    )


def unsent(
    call: Call, ctx: ToolContext, error: str, *, clock: Clock, jitter: Callable[[], float]
) -> ToolFailed:
    """The ``tool_failed`` record of an attempt that could not reach the tool's service, with
    when the next goes: backoff by the attempts in a row that were never sent, whatever the
    tool's ``retries`` (it is tried again for as long as it takes)."""
    delay = SERVICE_RETRY.delay(call.unsent + 1, jitter)
    return ToolFailed(
        call_id=call.id,
        attempt=ctx.attempt,
        error=error,
        retry_at=clock.time() + delay,
        unsent=True,
    )


def cancelled_from_outside() -> bool:
    """Whether a ``CancelledError`` seen here is a real cancellation of this task (an anyio
    scope around it was cancelled, or asyncio is cancelling the task), not one a tool raised."""
    if anyio.current_effective_deadline() == -math.inf:
        return True
    import asyncio  # on this rare path only: tether's import does not load asyncio

    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def ok_result(call: Call, content: Any, attempt: int, run_id: str, *, now: float) -> Event:
    """How a tool's attempt that returned ``content`` ended: its result (content blocks kept
    as blocks), or the wait it asked for (``sleep_until``, ``wait_for``, ``start_child``: the
    child's run id is made here, from the run's and the call's; a wait for a duration ends
    that long after ``now``, the supervisor's time)."""
    if isinstance(content, Wait):
        child = content.child
        if child is not None:
            child = {**child, "run_id": child_run_id(run_id, call.id)}
        return Waiting(
            call_id=call.id,
            attempt=attempt,
            until=content.deadline(now),
            event=content.event,
            result=content.result,
            ok=content.ok,
            child=child,
        )
    if isinstance(content, ContentBlocks):
        ok = not content.error
        return ToolResult(call_id=call.id, ok=ok, content=content.blocks, blocks=True)
    return ToolResult(call_id=call.id, ok=True, content=content)


def child_run_id(parent: str, call_id: str) -> str:
    """The run id of the child run call ``call_id`` of run ``parent`` starts: the same in every
    process, so a crash never starts it twice (``PARENT.CALL``; hashed when that would be too
    long or not a valid run id, as a call id journaled before ids were checked can make it)."""
    run_id = f"{parent}.{call_id}"
    if len(run_id) <= MAX_RUN_ID and _CHILD_PART.fullmatch(call_id):
        return run_id
    digest = hashlib.sha256(f"{parent}:{call_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{parent[: MAX_RUN_ID - 33]}.{digest[:32]}"


def error_result(call: Call, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, ok=False, content=message)


async def verify(
    call: Call,
    spec: ToolSpec,
    ctx: ToolContext,
    *,
    then_run: bool,
    otherwise: str,
    run_id: str,
    now: Callable[[], float],
) -> Event | None:
    """Ask the tool's ``verify`` function whether the call's last attempt landed: the result to
    record (what it found, ``otherwise`` when it found nothing, or the error it raised), or
    ``None`` when it found nothing and the call runs again (``then_run``).

    Whatever the function raises is the call's error result; only the run's own cancellation
    propagates.
    """
    try:
        landed = await spec.check_landed(call.input, ctx)
    except anyio.get_cancelled_exc_class():
        if cancelled_from_outside():
            raise
        return error_result(call, "the verify function raised CancelledError")
    except BaseException as exc:  # that call's error, never its siblings' cancellation
        return error_result(call, f"verify failed: {type(exc).__name__}: {exc}")
    if landed is not None:
        return ok_result(call, landed, call.attempts, run_id, now=now())
    return None if then_run else error_result(call, otherwise)


NOT_RUN = "not run: the run was cancelled before this call started"


def never_run(state: RunState, not_run: Container[str]) -> list[Event]:
    """What a cancellation taken in before a call starts leaves of the calls started with the
    model's answer (``not_run``, their ``tool_started`` durable): an error result each that
    says it did not run, so none is left in flight in a finished run's journal."""
    calls = state.calls.values()
    return [error_result(c, NOT_RUN) for c in calls if c.dangling and c.id in not_run]


def interrupted(state: RunState, not_run: Container[str]) -> list[Event]:
    """What a cancellation leaves of the calls in flight (started, nothing says how they
    ended): each one that really ran gets ``tool_failed`` with ``timed_out`` (its outcome is
    unknown, as after a crash: whether its effect happened is for a person to find out), each
    one started with the model's answer but never run (``not_run``) an error result that says
    it did not run."""
    records: list[Event] = []
    for call in state.calls.values():
        if not call.dangling:
            continue
        if call.id in not_run:
            records.append(error_result(call, NOT_RUN))
            continue
        records.append(_unknown_end(call, "the run was cancelled while this call ran"))
    return records


def abandoned(state: RunState, but: Container[str] = ()) -> list[Event]:
    """What a cancellation leaves of the calls the run's last process had in flight when it
    stopped (started, nothing says how they ended; those in ``but`` left out): ``tool_failed``
    with ``timed_out`` each, as ``interrupted`` gives, so that none is left in flight in a
    finished run's journal. Recorded with a cancellation of a run that no process holds, and
    with one a drive takes in from the inbox."""
    stopped = (
        "the run's process stopped while this call ran, and the run was cancelled before it "
        "was taken up again"
    )
    unresolved = "the call waited for a person to resolve it, and the run was cancelled first"
    return [
        _unknown_end(c, unresolved if c.escalated else stopped)
        for c in state.calls.values()
        if c.dangling and c.id not in but
    ]


def _unknown_end(call: Call, why: str) -> ToolFailed:
    return ToolFailed(
        call_id=call.id,
        attempt=call.attempts,
        error=f"interrupted: {why}; whether it had its effect is unknown",
        timed_out=True,
    )
