"""A person's answers, one implementation each: approve or reject, resolve, retry, signal,
cancel, repin (docs/design.md invariant 12).

Every front end calls these: ``Supervisor``'s methods, ``tether.operate`` (and so the operator
commands and the web console). Each verb builds its record and hands it to ``record_answer``,
which checks it against the run as its journal stands (and as the answers already queued for
it will leave it) and appends it under the run's write lock, or queues it in the run's inbox
while another process holds the run. What an answer sets off beyond its record is decided here
too: a cancellation goes on to the run's child runs whose waits are open.

What is a front end's own stays with it: a ``Supervisor`` stops its own task of a run before
a cancellation is recorded (``halt``) and wakes the run after an answer.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import msgspec

from .._errors import RunNotFoundError, RunStateError, quoted
from ..journal import (
    Budgets,
    Decision,
    Event,
    Repinned,
    Resolved,
    Retried,
    RunFinished,
    Signal,
    Store,
    ToolPin,
)
from ..journal._records import RESOLUTIONS, Resolution
from ..tools import wait_for
from ._answers import Recorded as Recorded
from ._answers import answer_problem as answer_problem
from ._answers import applying as applying
from ._answers import record_answer as record_answer
from ._attempt import abandoned
from ._children import child_ended, not_adopted
from ._state import RunState, RunStatus, fold

log = logging.getLogger("tether.supervisor")

EXTENDABLE = ("max_model_calls", "max_tool_calls", "max_tokens", "deadline_s")
_SIGNAL_ID = re.compile(r"[\x21-\x7e]{1,200}")

Clock = Callable[[], float]
Halt = Callable[[str], Awaitable[None]]


async def decide(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    note: str = "",
    clock: Clock = time.time,
) -> Recorded:
    """Approve (``approved``) or reject call ``call_id`` of run ``run_id``, as ``by``.

    A rejection reaches the model as an error tool result carrying ``note``. Refused after the
    call's approval deadline (the deadline's outcome stands).

    Raises:
        RunStateError: the call is not waiting for approval, or was decided already.
        RunNotFoundError, InvalidRunIdError, RecordTooLargeError, ...: as ``record_answer``.
    """
    record = Decision(call_id=call_id, approved=approved, by=by, note=note)
    return await record_answer(store, run_id, lambda _: record, clock=clock, busy_wait=True)


async def resolve(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    outcome: Resolution,
    result: Any = None,
    by: str,
    note: str = "",
    clock: Clock = time.time,
) -> Recorded:
    """Answer escalated call ``call_id``: it ``succeeded`` (``result`` is its result), run it
    again (``retry``, with the same idempotency key), or it ``failed`` (the model gets
    ``result``, else the note). A call that waits for its tool's service (nothing was sent)
    is answered the same way, ``succeeded`` or ``failed``, for a service that will not come
    back (it is tried again on its own, so ``retry`` is refused). Queued while another
    process holds the run, such an answer is recorded only if the call still waits for its
    service, after the same attempts, when that process takes it in (tried again meanwhile,
    the question may be another: it is dropped, and logged).

    Raises:
        ValueError: an unknown outcome, or a ``result`` with ``retry``.
        RunStateError: the call is neither escalated nor waiting for its service (or was
            resolved already).
        RunNotFoundError, InvalidRunIdError, RecordTooLargeError, ...: as ``record_answer``.
    """
    if outcome not in RESOLUTIONS:
        raise ValueError(f"outcome must be succeeded, retry or failed, not {outcome!r}")
    if outcome == "retry" and result is not None:
        raise ValueError("a result does not apply to the outcome retry")

    def build(state: RunState) -> Resolved:
        # An answer to a call that waits for its service answers that wait, after the
        # attempts it has now: queued, it is dropped if the call is tried again first.
        call = state.calls.get(call_id)
        attempts = None
        if call is not None and not call.done and call.unreached is not None:
            attempts = call.attempts
        return Resolved(
            call_id=call_id, outcome=outcome, result=result, by=by, note=note, attempts=attempts
        )

    return await record_answer(store, run_id, build, clock=clock, busy_wait=True)


async def retry(
    store: Store,
    run_id: str,
    *,
    by: str,
    note: str = "",
    extend: Iterable[tuple[str, float]] = (),
    budgets: Budgets | None = None,
    clock: Clock = time.time,
) -> Recorded:
    """Send on a run the runtime parked, or re-open a failed one, as ``by``.

    ``extend`` raises budgets by an amount each (``("max_model_calls", 20)``); ``budgets``
    instead replaces them whole. A run that would fail again at once is refused.

    Raises:
        ValueError: a limit in ``extend`` that is not a budget, an amount not above 0, or both
            ``extend`` and ``budgets``.
        RunStateError: the run is neither parked by the runtime nor failed, or would fail again
            at once on its budgets.
        RunNotFoundError, InvalidRunIdError, ...: as ``record_answer``.
    """
    extensions = [check_extension(name, amount) for name, amount in extend]
    if extensions and budgets is not None:
        raise ValueError("give either budgets (new limits) or extend (raises), not both")

    def build(state: RunState) -> Event:
        limits = budgets if budgets is not None else extended(state.budgets, extensions)
        return Retried(by=by, note=note, budgets=limits)

    return await record_answer(store, run_id, build, clock=clock, busy_wait=True)


def check_signal_id(signal_id: str) -> str:
    """Return ``signal_id`` if it is a signal's id: 1 to 200 printable characters without
    spaces (the sender's own delivery id, say).

    Raises:
        TypeError: not a string.
        ValueError: anything else.
    """
    if not isinstance(signal_id, str):
        raise TypeError(f"signal_id: expected a string, got {type(signal_id).__name__}")
    if not _SIGNAL_ID.fullmatch(signal_id):
        raise ValueError(
            f"a signal id is 1 to 200 printable characters without spaces, got {quoted(signal_id)}"
        )
    return signal_id


async def signal(
    store: Store,
    run_id: str,
    name: str,
    payload: Any = None,
    *,
    signal_id: str | None = None,
    by: str = "",
    clock: Clock = time.time,
) -> Recorded:
    """Deliver event ``name`` with ``payload`` (JSON-able) to run ``run_id``.

    A call waiting for ``name`` gets ``payload`` as its result; a signal that comes before
    anything waits for it is kept. One whose ``signal_id`` the run already has counts once,
    and is acknowledged as such (``repeated``) even after the run finished: a webhook's
    retried delivery is not an error. By default each delivery gets a new id.

    Raises:
        ValueError: ``name`` is not an event name, or ``signal_id`` is not 1 to 200 printable
            characters without spaces.
        RunStateError: the run finished (and has no signal of this id).
        RunNotFoundError, InvalidRunIdError, RecordTooLargeError, ...: as ``record_answer``.
    """
    wait_for(name)  # checks the name
    if signal_id is not None:
        check_signal_id(signal_id)
    record = Signal(name=name, signal_id=signal_id or uuid.uuid4().hex, payload=payload, by=by)
    return await record_answer(store, run_id, lambda _: record, clock=clock)


async def cancel(
    store: Store,
    run_id: str,
    *,
    reason: str = "cancelled",
    by: str = "",
    clock: Clock = time.time,
    halt: Halt | None = None,
) -> Recorded:
    """End run ``run_id`` as ``cancelled`` with ``reason`` (``"... (by NAME)"`` when ``by`` is
    given), then its child runs whose waits are open, and theirs.

    While another process advances the run, the cancellation is queued in the run's inbox and
    that process stops the run within about a second, whatever it is doing: the call in flight
    is cancelled and recorded as interrupted (its outcome unknown), no new call starts, and it
    records the cancellation. ``halt(run_id)``, called before each run's cancellation is
    recorded, is how a supervisor stops its own task of that run first.

    Raises:
        RunStateError: the run already finished.
        RunNotFoundError, InvalidRunIdError, ...: as ``record_answer``. A child that cannot be
            cancelled (it finished meanwhile, say) is logged and skipped.
    """
    said = f"{reason} (by {by})" if by else reason
    record = RunFinished(status=RunStatus.CANCELLED.value, reason=said)
    if halt is not None:
        await halt(run_id)
    # A call its last process had in flight when it stopped is ended first (outcome unknown):
    # a cancelled run's journal leaves no call in flight.
    done = await record_answer(store, run_id, lambda _: record, clock=clock, before=abandoned)
    children = await cancel_children(store, done.state, reason, by=by, clock=clock, halt=halt)
    started = done.state.started
    if not done.queued and started and started.parent and started.parent_call:
        # (queued: the holder records it, and tells the parent as it carries it out)
        await tell_parent(store, run_id, (started.parent, started.parent_call), clock=clock)
    return dataclasses.replace(done, children=tuple(children)) if children else done


Give = Callable[[str, Callable[[], Awaitable[Recorded]]], Awaitable[Recorded]]
"""How an answer is given to a run: ``give(run_id, record)`` (a supervisor's own way, which
then continues the run, or at once)."""


async def _at_once(run_id: str, record: Callable[[], Awaitable[Recorded]]) -> Recorded:
    return await record()


async def tell_parent(
    store: Store,
    child_id: str,
    parent: tuple[str, str],
    *,
    clock: Clock = time.time,
    give: Give = _at_once,
) -> None:
    """Record in run ``parent[0]`` (``child_ended``, for its call ``parent[1]``) that its child
    run ``child_id`` has ended, through ``give``: a parent asleep for it then wakes at once.

    Best effort: a parent that finished, or has the end already, is left as it is, and one
    that cannot be reached finds out by itself at its next drive. A store whose sweeps list
    only unfinished runs (PostgreSQL) would never read the child again to tell it.
    """
    parent_id, call_id = parent
    try:
        ended = child_ended(call_id, fold(await store.read(child_id)))
        if ended is not None:
            await give(
                parent_id, lambda: record_answer(store, parent_id, lambda _: ended, clock=clock)
            )
    except (RunStateError, RunNotFoundError) as exc:  # recorded already, or it went on
        log.debug("run %s ended; its parent %s did not take it: %s", child_id, parent_id, exc)
    except Exception as exc:  # the parent finds out by itself at its next drive
        log.warning("run %s ended; telling its parent %s failed: %s", child_id, parent_id, exc)


async def cancel_children(
    store: Store,
    state: RunState,
    reason: str,
    *,
    by: str = "",
    clock: Clock = time.time,
    halt: Halt | None = None,
) -> list[tuple[str, Recorded]]:
    """Cancel each child run of ``state`` whose wait is open (the child has not ended), with
    ``"its parent: REASON"``, and return what became of each cancellation; a run that only
    has a child's id, and is not the child (``not_adopted``), is left alone."""
    done: list[tuple[str, Recorded]] = []
    for call in list(state.calls.values()):
        wait = call.wait
        if wait is None or wait.child is None:
            continue
        child = str(wait.child.get("run_id"))
        if child in state.children:
            continue
        try:
            found = fold(await store.read(child))
            if not_adopted(state.run_id, call.id, child, found) is not None:
                continue
            if found.finished is None:
                said = f"its parent: {reason}"
                done.append(
                    (child, await cancel(store, child, reason=said, by=by, clock=clock, halt=halt))
                )
        except (RunStateError, RunNotFoundError) as exc:  # it ended, or was never created
            log.debug("run %s: child run %s not cancelled: %s", state.run_id, child, exc)
    return done


async def repin(
    store: Store,
    run_id: str,
    *,
    tools: Sequence[ToolPin] = (),
    model: tuple[str, dict[str, Any]] | None = None,
    by: str,
    note: str = "",
    clock: Clock = time.time,
) -> Recorded:
    """Let run ``run_id`` go on under new contracts, as ``by`` accepts them: ``tools`` replace
    the pins of the same names (or are added), ``model`` (name, parameters) the model's.

    Recorded as ``repinned``: a run parked because its worker lacked its contract can then go
    on, and the model is shown the new contract from its next call; earlier turns stay as
    they were. Refused while a call of a repinned tool is open in the model's turn.

    Raises:
        RunStateError: the run finished, a call of one of those tools is not finished, or
            nothing was given to repin.
        RunNotFoundError, InvalidRunIdError, ...: as ``record_answer``.
    """
    record = repin_record(tools=tools, model=model, by=by, note=note)
    return await record_answer(store, run_id, lambda _: record, clock=clock, busy_wait=True)


def repin_record(
    *,
    tools: Sequence[ToolPin] = (),
    model: tuple[str, dict[str, Any]] | None = None,
    by: str,
    note: str = "",
) -> Repinned:
    """The ``repinned`` record ``repin`` writes for these pins (checked only when recorded):
    also what a crash test's person answers a run parked for its contract with
    (``tether.testing.Stranded.repin``)."""
    return Repinned(
        tools=list(tools),
        model=None if model is None else model[0],
        model_params=None if model is None else dict(model[1]),
        by=by,
        note=note,
    )


def check_extension(name: str, amount: float) -> tuple[str, float]:
    """``(name, amount)`` if ``name`` is a budget and ``amount`` raises it.

    Raises:
        ValueError: saying what is wrong.
    """
    if name not in EXTENDABLE:
        raise ValueError(f"{name!r} is not a budget; extend one of {', '.join(EXTENDABLE)}")
    if not amount > 0:
        raise ValueError(f"an extension must be more than 0, got {name}={amount}")
    return name, amount


def extended(budgets: Budgets, extensions: list[tuple[str, float]]) -> Budgets | None:
    """``budgets`` with each named limit raised by its amount (an unlimited one stays so);
    ``None`` when there is nothing to extend."""
    if not extensions:
        return None
    changes: dict[str, Any] = {}
    for name, amount in extensions:
        current = changes.get(name, getattr(budgets, name))
        if current is not None:
            changes[name] = current + amount
    return msgspec.structs.replace(budgets, **changes)
