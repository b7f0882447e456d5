"""Driving a run until it rests: restarts after a crash, waits for a store that failed.

A run's task can end four ways besides resting: another worker owns the run now (its lock is
held elsewhere, or its lease was lost), the run is gone, its journal is damaged (the run needs
a person), or something failed. A failure of the store (``_failures.is_store_failure``) is
waited out with backoff for as long as it takes and counts nothing against the run; any other
failure is the run's own crash, restarted with backoff and counted, by the next drive's
``resumed`` record, towards its crash-loop limit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from .._backoff import Backoff, sleep_unless
from .._errors import (
    JournalBrokenError,
    JournalClosedError,
    JournalError,
    JournalIOError,
    JournalLockedError,
    LeaseLostError,
    RunNotFoundError,
)
from .._failpoints import failpoint
from ..journal import JournalHandle, Store
from ._entry import Entry
from ._failures import explain, is_store_failure, unusable
from ._loop import drive
from ._runtime import Interruption, LeftForAnother, Runtime
from ._state import RunStatus
from ._status import Standing

log = logging.getLogger("tether.supervisor")

OWNED_ELSEWHERE = Standing(RunStatus.RUNNING, "owned by another process")
LOCKED_ELSEWHERE = Standing(RunStatus.RUNNING, "held by another process")
"""``OWNED_ELSEWHERE`` found so this time (the run's lock or lease is another's), not left for
another worker or lost by this one: its caller says so once."""
"""What ``drive_until_rest`` returns when another worker holds the run."""
GONE = Standing(RunStatus.RUNNING, "gone from the store")
"""What ``drive_until_rest`` returns when the run is no longer in the store."""


def report_gone(run_id: str, known: Entry | None) -> None:
    """Log that run ``run_id`` is no longer in the store, as loud as what it says: ``tether
    gc`` removes finished runs (found between a sweep's listing and its read, say), which is
    routine (DEBUG); a run another process had may have been finished and removed there
    (INFO); one known here to be unfinished was removed under it (WARNING)."""
    if known is None or known.status.final:
        log.debug("run %s is gone from the store (removed once finished: tether gc, say)", run_id)
    elif known.remote:
        log.info("run %s is gone from the store; another process had it", run_id)
    else:
        log.warning(
            "run %s disappeared from the store while %s here (removed by hand?)",
            run_id,
            known.status.value,
            extra={"run_id": run_id},
        )


async def drive_until_rest(
    store: Store,
    rt: Runtime,
    run_id: str,
    journal: JournalHandle | None,
    *,
    fresh: bool,
    alone: bool,
    crash_backoff: Backoff,
    store_backoff: Backoff,
    sleep: Callable[[float], Awaitable[None]],
    jitter: Callable[[], float],
) -> Standing | None:
    """Drive run ``run_id`` (opening ``journal`` if it is ``None``) until it rests.

    Returns its resting outcome, ``OWNED_ELSEWHERE`` (``LOCKED_ELSEWHERE``: found held) when
    another worker holds it, ``GONE``
    when it is no longer in the store, or ``None`` when the supervisor is stopping
    (``rt.stopping``).

    On cancellation: propagates; the drive records the run as suspended.
    """
    crashes = 0
    outages = 0
    prior: Interruption | None = None
    while True:
        try:
            if journal is None:
                journal = await _open(store, run_id, rt)
                if journal is None:
                    return None  # the supervisor began to stop while the journal opened
            async with journal:
                outcome = await drive(journal, rt, fresh=fresh, prior=prior, alone=alone)
            if outcome is None:
                return None  # suspended: the supervisor is stopping
            if outcome.status.resting and not outcome.status.final:
                failpoint("parked")
            return outcome
        except LeftForAnother as left:
            log.info("run %s: %s", run_id, left, extra={"run_id": run_id})
            return OWNED_ELSEWHERE
        except Exception as exc:
            lost = _lease_lost(exc)
            if lost is not None:
                log.warning(
                    "run %s: %s; its calls here were stopped and nothing more is recorded "
                    "here: the next worker to claim the run resumes it (this one too, once "
                    "it can)",
                    run_id,
                    lost,
                    extra={"run_id": run_id},
                )
                return OWNED_ELSEWHERE
            if isinstance(exc, JournalLockedError):
                # (also after a crash of ours: another worker may have taken it meanwhile;
                # said once by the caller, not at every sweep that tries its lock)
                return LOCKED_ELSEWHERE
            if isinstance(exc, RunNotFoundError):
                return GONE
            if unusable(exc) or (isinstance(exc, JournalError) and not _recoverable(exc)):
                log.error("run %s cannot be opened: %s", run_id, explain(exc))
                return Standing(RunStatus.NEEDS_ATTENTION, explain(exc))
            journal, fresh, alone = None, False, False
            why = explain(exc)
            if is_store_failure(exc):
                # Not the run's doing: wait for the store, as long as it takes.
                outages += 1
                prior = Interruption(f"store: {why}", charged=False)
                delay = store_backoff.delay(outages, jitter)
                log.warning(
                    "run %s: the store failed (%s); trying again in %.1f s",
                    run_id,
                    why,
                    delay,
                    extra={"run_id": run_id},
                )
            else:
                crashes += 1
                prior = Interruption(f"error: {why}", charged=True)
                if crashes > max(rt.max_restarts, 10) + 1:
                    # The journal's crash-loop count normally parks the run; this catches
                    # failures that happen before an interruption can even be recorded.
                    log.error("run %s keeps failing: %s", run_id, why)
                    return Standing(RunStatus.NEEDS_ATTENTION, f"keeps failing: {why}")
                delay = crash_backoff.delay(crashes, jitter)
                log.warning("run %s crashed (%s); restarting", run_id, why)
            await sleep_unless(rt.stopping, sleep, delay)
            if rt.stopping.is_set():
                return None


async def _open(store: Store, run_id: str, rt: Runtime) -> JournalHandle | None:
    """The run's journal, or ``None`` if the supervisor began to stop first: opening may wait
    a while (a PostgreSQL claim tries a database out of reach again for its
    ``reconnect_timeout``), and a drain must not wait for a run nothing of which runs yet."""
    if rt.stopping.is_set():
        return None
    with anyio.CancelScope() as opening:
        rt.opening.add(opening)
        try:
            return await store.open(run_id)
        finally:
            rt.opening.discard(opening)
    return None  # cancelled by the drain


def _lease_lost(exc: BaseException) -> LeaseLostError | None:
    """The ``LeaseLostError`` in ``exc`` (raised where concurrent tool calls ran, it comes
    wrapped in an exception group), if any: the run belongs to another worker now."""
    if isinstance(exc, LeaseLostError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        group = exc.subgroup(LeaseLostError)
        if group is not None:
            return _lease_lost(group.exceptions[0])
    return None


def _recoverable(exc: JournalError) -> bool:
    """A broken or closed handle, and a file the OS refused for now (a full disk), heal by
    trying again; corruption and newer formats do not."""
    return isinstance(exc, (JournalBrokenError, JournalClosedError, JournalIOError))
