"""Whether a person's answer (a decision, a resolution, a retry, a cancellation) fits the run.

One check serves every way an answer arrives: ``Supervisor.decide``/``resolve``/``retry``/
``cancel``, the operator commands, the console, and answers queued in a run's inbox, which the
owner checks again when it folds them in (so an answer delivered twice is ignored the second
time). It reads only the journal (the contracts the run pinned) and the time, never the
application. ``record_answer`` is the one way an answer reaches a store: checked, then appended
under the run's write lock and its inbox's lock (``Store.append_unless_queued``), or checked and
queued in its inbox under that same inbox lock while another process holds the run; a
signal the run already has (``repeated``) is acknowledged and neither. ``fold_inbox`` is how
the owner takes the queued answers in.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import msgspec

from .._errors import JournalLockedError, RecordTooLargeError, RunStateError, quoted
from .._failpoints import failpoint
from ..journal import (
    AnyEvent,
    Budgets,
    ChildEnded,
    Decision,
    Event,
    JournalHandle,
    Repinned,
    Resolved,
    Retried,
    RunFinished,
    Signal,
    Store,
)
from ..journal._records import check_types
from ._budgets import budget_problem, limits_problem
from ._runtime import Mailbox
from ._state import Call, RunState, RunStatus, fold
from ._status import approval_deadline, pinned_tool, run_status

log = logging.getLogger("tether.supervisor")


def answer_problem(state: RunState, answer: Event | AnyEvent, now: float) -> str | None:
    """Why ``answer`` cannot be recorded at wall-clock ``now``, or ``None`` if it can."""
    if isinstance(answer, Retried):
        return retry_problem(state, answer.budgets, now)
    if state.finished is not None:
        return f"run already finished ({state.finished.status})"
    if isinstance(answer, (RunFinished, Signal)):
        return None  # (a signal delivered again is acknowledged: see ``repeated``)
    if isinstance(answer, ChildEnded):
        call = state.calls.get(answer.call_id)
        wait = None if call is None else call.wait
        if wait is None or wait.child is None or wait.child.get("run_id") != answer.child:
            return f"no call waits for child run {answer.child!r}"
        if answer.child in state.children:
            return f"the end of child run {answer.child!r} is recorded already"
        return None
    if isinstance(answer, Decision):
        return _decision_problem(state, answer, now)
    if isinstance(answer, Repinned):
        return _repin_problem(state, answer)
    if isinstance(answer, Resolved):
        call = state.calls.get(answer.call_id)
        if call is None or call.done:
            return _not_open(state, answer.call_id)
        unreached = call.unreached is not None
        if answer.attempts is not None and (not unreached or call.attempts != answer.attempts):
            # Given for the call's wait for its service after that many attempts; it was
            # tried again since, and what a person would answer now may differ (an attempt
            # sent, its outcome unknown, escalated).
            return (
                f"call {call.id!r} ({call.name}) no longer waits for its service as it did "
                f"when this answer was given (after attempt {answer.attempts}): it "
                f"{_standing(call)}; look at the call again before answering it"
            )
        if unreached:
            # It waits for its service, perhaps for good (a retired server, a revoked
            # credential): a person may hand the model a result instead.
            if answer.outcome == "retry":
                return (
                    f"call {call.id!r} ({call.name}) waits for its service and is tried again "
                    "on its own; resolve it as succeeded (with its result) or failed, or "
                    "cancel the run"
                )
            return None
        if not call.escalated:
            pin = pinned_tool(state, call.name)
            if call.resolution is not None:
                why = "was already resolved"
            elif pin is not None and pin.approval and call.decision is None and not call.attempts:
                why = "is not escalated: it waits for approval (approve or reject it)"
            else:
                why = (
                    "is not escalated: only a call whose outcome is unknown, or that its tool "
                    "escalated, or that waits for its service, is resolved"
                )
            return f"call {call.id!r} ({call.name}) {why}"
        return None
    return f"a {type(answer).__name__} record is not an answer a person can give"


def _standing(call: Call) -> str:
    """Where ``call`` stands, in words, for an answer given for an earlier wait of it."""
    if call.resolution is not None:
        return "was resolved"
    if call.escalated:
        return f"was escalated after attempt {call.attempts}"
    if call.unreached is not None:
        return f"still waits for its service, after attempt {call.attempts}"
    return f"was tried again (attempt {call.attempts})"


def repeated(state: RunState, answer: Event | AnyEvent) -> bool:
    """Whether ``answer`` is a signal the run has recorded already (by its id): delivered
    again, as a webhook's retry is, it is acknowledged and not recorded a second time."""
    return isinstance(answer, Signal) and answer.signal_id in state.signal_ids


def _decision_problem(state: RunState, answer: Decision, now: float) -> str | None:
    call = state.calls.get(answer.call_id)
    if call is None or call.done:
        return _not_open(state, answer.call_id)
    if call.escalated:
        return f"call {call.id!r} is escalated; answer it with resolve"
    pin = pinned_tool(state, call.name)
    if pin is None or not pin.approval:
        return f"call {call.id!r} ({call.name}) is not waiting for approval (its tool needs none)"
    if call.decision is not None:
        was = "approved" if call.decision.approved else "rejected"
        return f"call {call.id!r} was already {was} by {call.decision.by}"
    if call.attempts or call.resolution is not None:
        return (
            f"call {call.id!r} ({call.name}) is not waiting for approval "
            f"(started {call.attempts} time(s))"
        )
    deadline = approval_deadline(state, call)
    if deadline is not None and now >= deadline:
        return (
            f"the approval deadline of call {call.id!r} ({call.name}) passed "
            f"{now - deadline:.0f} s ago; the deadline's outcome stands"
        )
    return None


def _repin_problem(state: RunState, answer: Repinned) -> str | None:
    if not answer.tools and answer.model is None:
        return "nothing to repin: no tool and no model given"
    names = {pin.name for pin in answer.tools}
    for call in state.calls.values():
        if call.name in names and not call.done:
            return (
                f"call {call.id!r} ({call.name}) is not finished: a contract does not change "
                "under a call that was started, approved or waits for one under the old "
                "contract; resolve, reject or cancel it first"
            )
    if _pinned_already(state, answer):
        who = f" (repinned by {state.repinned_by})" if state.repinned is not None else ""
        return f"nothing to repin: the run is on these contracts already{who}"
    return None


def _pinned_already(state: RunState, answer: Repinned) -> bool:
    """Whether the run goes by every contract ``answer`` gives already (two people
    accepting one change at once: the second has nothing left to accept)."""
    manifest = state.manifest
    pins = {pin.name: pin for pin in manifest.tools}
    if any(pins.get(pin.name) != pin for pin in answer.tools):
        return False
    if answer.model is not None and answer.model != manifest.model:
        return False
    return answer.model_params is None or answer.model_params == manifest.model_params


def _not_open(state: RunState, call_id: str) -> str:
    call = state.calls.get(call_id)
    if call is not None:
        return f"call {call_id!r} ({call.name}) already has its result"
    turn = ", ".join(f"{c.id} ({c.name})" for c in state.calls.values()) or "none"
    return f"call {quoted(call_id)} is not in the model's current turn (calls there: {turn})"


def retry_problem(state: RunState, budgets: Budgets | None, now: float) -> str | None:
    """Why the run cannot be sent on with ``budgets`` (``None``: as they are), or ``None``.

    A run can be retried when the runtime parked it (a model that refused, a crash loop) or
    when it failed; a failed run must not still be over a budget once ``budgets`` apply.
    """
    if budgets is not None and (wrong := limits_problem(budgets)) is not None:
        return wrong
    finished = state.finished
    if finished is not None and finished.status != RunStatus.FAILED:
        return f"run already finished ({finished.status})"
    if finished is None and state.parked is None:
        status = run_status(state, now)
        if status.status is RunStatus.NEEDS_ATTENTION and status.pending:
            return (
                "its calls wait for a resolution; answer them with resolve "
                "(succeeded, retry or failed)"
            )
        return f"nothing to retry: the run is {status.status}" + (
            f" ({status.reason})" if status.reason else ""
        )
    if finished is None:
        return None
    limits = budgets or state.budgets
    over = budget_problem(state, now, for_model=not state.turn_open, starting=1, budgets=limits)
    if over is not None:
        return f"the run would fail again at once: {over}; extend its budgets"
    return None


@dataclass(frozen=True)
class Recorded:
    """An answer that was recorded, and the run as it stood just before.

    Attributes:
        record: the record as written (its ``seq`` set), or as queued in the run's inbox
            (``seq`` -1) when another process held the run.
        state: the run's folded state the answer was checked against.
        repeated: the answer is a signal the run had already (by its id): acknowledged,
            neither written nor queued again (``record`` is as built, ``seq`` -1).
        pending: with ``repeated``, the signal the run had is not in its journal yet but
            queued in its inbox, for the process that holds the run to check and record
            (``False``: recorded in the journal).
        behind: the answer was queued behind answers that wait in the inbox of a run no
            process holds now (queued while one did, which stopped before its next pause):
            the process that takes the run up next records them, and it, in order.
        children: for a cancellation, what became of the cancellation of each child run it
            went on to (``(run_id, Recorded)``, in the order of the parent's calls).
    """

    record: Event | AnyEvent
    state: RunState
    repeated: bool = False
    pending: bool = False
    behind: bool = False
    children: tuple[tuple[str, Recorded], ...] = ()

    @property
    def queued(self) -> bool:
        """Whether the answer waits in the run's inbox (another process held the run)."""
        return self.record.seq < 0 and not self.repeated


async def record_answer(
    store: Store,
    run_id: str,
    build: Callable[[RunState], Event],
    *,
    clock: Callable[[], float] = time.time,
    before: Callable[[RunState], list[Event]] | None = None,
    busy_wait: bool = False,
) -> Recorded:
    """Build an answer from the run's state, check it, and append it (or queue it).

    ``before`` gives records to append in the same group ahead of the answer, where it is
    appended here (not where it is queued: the holder writes what its own state calls for).

    While another process holds the run, the answer is checked against the run as its journal
    stands *and* as the answers already queued for it will leave it (an approval queued after
    another person's rejection of the same call is refused now, not ignored later), then
    queued; the holder checks it once more when it records it. With ``busy_wait`` (an answer
    that another person's may have answered already: a decision, a resolution, a retry, a
    repin), two such answers of this thread to one run go one after the other, so that the
    second is checked against the first, and a journal held only for a moment (another
    process's answer landing) is waited for (``BUSY_TRIES``). A cancellation or a signal waits
    for neither: it fits whatever another answer did, and a busy run must hear of it without
    delay. A signal
    the run already has
    (by its id) is acknowledged and neither appended nor queued, even after the run finished.
    ``store`` must be entered (a directory store writes through its writer threads).

    Raises:
        RunNotFoundError, InvalidRunIdError: no such run, or not a run id.
        RunStateError: the answer does not fit the run (``answer_problem`` says why).
        TypeError: a field of the answer is of another type than its record declares (a
            caller's ``by=5``): nothing written or queued (``check_types``).
        RecordTooLargeError: the journal could not hold the answer (nothing written or queued).
        JournalCorruptError, JournalVersionError: the journal cannot be read.
        JournalIOError, JournalBrokenError, OSError: the store failed, or another answer
            kept the run's inbox locked for its patience (10 s; nothing written or queued);
            for a broken journal the answer may or may not have been recorded.

    Cancellation while the record is being appended leaves it recorded or not (the journal
    decides, never half); the caller learns nothing either way.
    """

    def checked(state: RunState) -> Event | None:
        """The answer to write, ``None`` for a signal the run has already."""
        record = build(state)
        check_types(record, f"a {record.__struct_config__.tag} answer for run {run_id!r}")
        if repeated(state, record):
            return None
        problem = answer_problem(state, record, clock())
        if problem is not None:
            raise RunStateError(run_id, problem)
        return record

    async def queue(*, behind: bool) -> Recorded:
        """Check the answer against the run as its journal stands, with the answers queued
        before it applied as the holder will apply them, and queue it behind them: one step
        of the store's (``post_checked``), so that another answer queued at the same moment,
        from any process, is judged against this one (or this one against it)."""
        outcome: list[Recorded] = []

        def choose(events: list[AnyEvent], queued: list[AnyEvent]) -> Event | None:
            state = fold(events)
            if repeated(state, journaled := build(state)):
                outcome.append(Recorded(journaled, state, repeated=True))
                return None
            applying(state, queued, clock())  # the run as the holder will find it
            record = checked(state)
            if record is None:  # the same signal waits in the inbox, not recorded yet
                outcome.append(Recorded(build(state), state, repeated=True, pending=True))
                return None
            outcome.append(Recorded(record, state, behind=behind))
            return record

        await store.post_checked(run_id, choose)
        return outcome[-1]

    lock = _answering(store.location(run_id)) if busy_wait else contextlib.nullcontext()
    async with lock:
        journal = await _open_unless_busy(store, run_id, BUSY_TRIES if busy_wait else 1)
        if journal is None:
            # A worker is advancing the run (its journal's lock, or a live lease): the answer
            # is queued in the run's inbox; the worker records it at its next pause.
            return await queue(behind=False)
        async with journal:
            state = fold(journal.events)
            try:
                record = checked(state)
            except RunStateError:
                # Only where answers wait (a look that takes no lock): reading the inbox waits
                # for its lock, which a poster stopped mid-post could keep for good.
                if await store.has_inbox(run_id) and await store.peek_inbox(run_id):
                    return await queue(behind=True)  # it may fit the run they leave (below)
                raise  # (refused as the run stood: nothing written, no promise broken)
            if record is None:
                return Recorded(build(state), state, repeated=True)
            ahead = [] if before is None else before(state)
            # Appended under the lock of the run's inbox, the one a queued answer is checked
            # under (``queue``): an answer given at the same moment by another process, which
            # found the journal held by this one, is checked against this record, never
            # against the journal without it (acknowledged, then dropped by the holder).
            appended = await store.append_unless_queued(journal, [*ahead, record], at=clock())
            if appended is None:
                # Acknowledged as queued while a process held the run, which stopped before
                # it recorded them: this answer goes behind them, so that none is judged
                # without the others (a rejection recorded now would have made a queued
                # approval of the same call be dropped) and they are recorded in the order
                # they were given.
                return await queue(behind=True)
        return Recorded(appended[-1], state)


BUSY_TRIES = 6
BUSY_PAUSE = 0.05
"""An answer finds the run's journal held: it tries to open it ``BUSY_TRIES`` times in all,
this many seconds apart, before it queues the answer for the holder. Another person's answer holds a
journal for milliseconds (one append); a worker advancing the run holds it for as long as the
run is busy. Queued against the journal as it stood before that other answer landed, an
answer would be acknowledged as queued and then refused by the holder (two people answering
one call at once: the second must be told it was answered already)."""

_locks: weakref.WeakValueDictionary[tuple[int, str], anyio.Lock] = weakref.WeakValueDictionary()


def _answering(where: str) -> anyio.Lock:
    """The lock of this thread's answers to the run at ``where``: two of them at once (two
    requests to one console) go one after the other, so each is checked against the other's
    record. One per thread: a lock belongs to one event loop, and a thread that runs its own
    (``anyio.run`` in a thread of a threaded web server) must never wait on another's."""
    key = (threading.get_ident(), where)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = anyio.Lock()
    return lock


async def _open_unless_busy(store: Store, run_id: str, tries: int) -> JournalHandle | None:
    """The run's journal, opened for this answer; ``None`` while a process advances the run
    (it stayed held through ``tries``, ``BUSY_PAUSE`` apart)."""
    for attempt in range(tries):
        try:
            return await store.open(run_id)
        except JournalLockedError:
            if attempt == tries - 1:
                return None
            await anyio.sleep(BUSY_PAUSE)
    return None


def applying(state: RunState, queued: list[AnyEvent], now: float) -> list[AnyEvent]:
    """Apply to ``state`` (in place) the queued answers its holder will record, as it will:
    in order, each only if it still fits; the answers that do, in their order."""
    taken: list[AnyEvent] = []
    for answer in queued:
        if repeated(state, answer) or answer_problem(state, answer, now) is not None:
            continue
        state.apply(msgspec.structs.replace(answer, seq=state.applied))
        taken.append(answer)
    return taken


async def fold_inbox(
    mailbox: Mailbox | None,
    run_id: str,
    state: RunState,
    append: Callable[[list[Event]], Awaitable[None]],
    *,
    clock: Callable[[], float],
) -> bool:
    """Record the answers people queued while this process held the run's journal.

    Each answer is checked against ``state`` as it stands when its turn comes (``append``
    writes it and folds it into ``state``); one that no longer fits is logged and dropped, a
    signal the run has already is skipped, and a signal is recorded even if the run finished
    since it was queued. Returns whether any answer was recorded.
    """
    if mailbox is None or not await mailbox.has_inbox(run_id):
        return False
    answers = await mailbox.take_inbox(run_id)
    recorded = False
    for answer in answers:
        if repeated(state, answer):
            continue  # a signal delivered twice while the run was held
        problem = answer_problem(state, answer, clock())
        if problem is not None and isinstance(answer, Signal) and state.finished is not None:
            # Queued while the run had not finished (a post is checked first), and finished
            # before this pause: kept, as it would have been had nobody held the run then,
            # so that its delivery holds and a delivery again counts once.
            problem = None
        if problem is not None:
            log.warning("run %s: ignored a queued answer: %s", run_id, problem)
            continue
        try:
            await append([answer])
        except RecordTooLargeError as exc:  # queued by an older tether, which did not check
            log.error(
                "run %s: a queued %s cannot be journaled and is dropped: %s",
                run_id,
                type(answer).__name__,
                exc.reason,
            )
            continue
        recorded = True
    failpoint("inbox_folded")  # a crash here leaves them in both: the check above copes
    await mailbox.clear_inbox(run_id, len(answers))
    return recorded
