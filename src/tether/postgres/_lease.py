"""Leases: how a worker takes a run (claim), keeps it (renew) and gives it up (release).

A lease is ``owner``, ``epoch`` and ``expires_at`` in the run's row, timed by the database's
clock. Claiming is one conditional ``UPDATE`` (free or expired -> epoch + 1); one timer renews
every lease a store holds in one statement, independent of slow tools and model calls;
closing a run releases it. A statement that takes a lease is settled (``settled``): it
finishes, or fails, before a cancellation reaches its caller, and a caller cancelled by then
gives the lease back (``hand_over``), so a stopping supervisor never leaves a run locked for a
lease nobody renews.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from .._errors import JournalCorruptError, JournalLockedError, RunNotFoundError
from ._connection import connection_errors
from ._journal import PgJournal, decode_rows

if TYPE_CHECKING:
    from ._parts import StoreParts

log = logging.getLogger("tether.postgres")


def settled() -> anyio.CancelScope:
    """Around one statement that takes a lease, from taking a pooled connection to giving it
    back: it finishes (within the statement timeout) before a cancellation is delivered, so
    the caller knows whether it holds the run."""
    return anyio.CancelScope(shield=True)


async def hand_over(journal: PgJournal) -> None:
    """Give ``journal`` to its caller, unless the caller was cancelled meanwhile: then release
    the lease it will never use (a stopping supervisor must not leave runs locked)."""
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        await journal.aclose()
        raise


async def claim(store: StoreParts, run_id: str) -> PgJournal:
    """Claim and read; through a dropped connection or a restart, try again (a claim that
    did land is this owner's, and claiming it again only moves the epoch on).

    Raises:
        RunNotFoundError, JournalCorruptError.
        JournalLockedError: another worker holds the run (its lease is live).
    """
    sql = store.sql
    deadline = time.monotonic() + store.reconnect_timeout
    delay = 0.05
    while True:
        started = time.monotonic()
        try:
            # One attempt is not cancelled half way: a claim that landed while its caller
            # went away would hold the run, with no handle to renew or release it.
            with settled():
                async with store.pool.acquire() as conn:
                    claimed = await conn.fetchrow(
                        sql.claim,
                        run_id,
                        store.owner,
                        store.lease_ttl,
                        timeout=store.statement_timeout,
                    )
                    if claimed is None:
                        if await conn.fetchval(sql.exists, run_id) is None:
                            raise RunNotFoundError(run_id)
                        raise JournalLockedError(store.location(run_id))
                    epoch, before, ended = claimed
                    rows = await conn.fetch(sql.read, run_id)
                    try:
                        events = decode_rows(store.location(run_id), rows)
                    except JournalCorruptError:
                        await conn.execute(sql.release, run_id, epoch, store.owner, False)
                        raise
        except connection_errors():
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(delay)
            delay = min(1.0, delay * 2)
            continue
        journal = PgJournal(store, run_id, epoch, events)
        journal.valid_until = started + store.lease_ttl
        if before is not None and before != store.owner and ended is not None:
            journal.taken_from = taken_from(before, ended)
        journal.lapsed = before == store.owner  # this worker held it, and lost it unreleased
        return journal


def taken_from(owner: str, ended: float) -> str:
    """The worker whose run was taken over when its lease ended at ``ended`` (epoch seconds),
    in words."""
    when = dt.datetime.fromtimestamp(ended, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"worker {owner}, whose lease ended at {when}"


async def renew(store: StoreParts, journals: list[PgJournal]) -> None:
    """Extend the leases of ``journals`` in one statement; mark the refused ones lost."""
    if not journals:
        return
    started = time.monotonic()
    rows = await store.pool.fetch(
        store.sql.renew,
        store.owner,
        store.lease_ttl,
        [j.run_id for j in journals],
        [j.epoch for j in journals],
        timeout=store.statement_timeout,
    )
    renewed = {r[0] for r in rows}
    for journal in journals:
        if journal.run_id in renewed:
            journal.valid_until = started + store.lease_ttl
        elif journal.active:  # (a handle closed meanwhile released its lease itself)
            journal.mark_lost(f"renewal at epoch {journal.epoch} refused")


async def renew_held(store: StoreParts, held: Callable[[], Iterable[PgJournal | None]]) -> None:
    """Every third of the lease's life, renew the lease of every active journal in ``held()``
    (for as long as the task runs); a failed renewal is tried again at the next."""
    while True:
        await anyio.sleep(store.lease_ttl / 3)
        journals = [j for j in held() if j is not None and j.active]
        try:
            await store.renew(journals)
            await store.renew_adverts()
        except Exception as exc:  # never take the host down: fence() asks again later
            log.warning("lease renewal failed (%s); retrying", exc)
            # (a lease that runs out meanwhile is lost: each handle's own timer says so)


async def release(store: StoreParts, journal: PgJournal) -> None:
    """Give the run's lease up, saying whether an answer was recorded (the release notifies
    the other workers then); a release that cannot reach the database is left to expire."""
    try:
        await store.pool.execute(
            store.sql.release,
            journal.run_id,
            journal.epoch,
            store.owner,
            journal.answered,
            timeout=store.statement_timeout,
        )
    except connection_errors() as exc:
        # The lease runs out by itself; this owner may also claim it again before then.
        log.warning("run %s: could not release its lease (%s)", journal.run_id, exc)


async def why_rejected(store: StoreParts, journal: PgJournal) -> str:
    """Who holds the run now, for the error of an append its epoch could not make."""
    try:
        row = await store.pool.fetchrow(store.sql.lease_of, journal.run_id)
    except connection_errors():
        return f"append at epoch {journal.epoch} rejected"
    if row is None:
        return "the run was removed"
    owner, epoch, _next = row
    holder = owner or "nobody"
    return f"held by {holder} at epoch {epoch}; this worker had epoch {journal.epoch}"
