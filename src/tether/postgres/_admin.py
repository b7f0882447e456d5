"""Removing what a PostgreSQL store no longer needs: old runs and blobs nobody refers to.

What ``tether gc --store URL`` does once it has chosen the runs to remove (from their events,
exactly as for a directory store). Here the removals are made safe against the workers using
the store at the same time:

- A run is deleted only if it finished and nobody holds a live lease on it, in one transaction
  that locks its row (a worker claiming it meanwhile waits, then finds no run). Its events go
  with it in the same statement, and its inbox by ``ON DELETE CASCADE``.
- A worker stores a large tool result in ``blobs`` before the event that refers to it, and an
  identical result reuses the stored row. So any run a worker owns may be about to refer to a
  blob that nothing refers to yet. Blobs are therefore deleted only under a ``SHARE`` lock on
  ``runs`` (which every claim and append waits for), only while no run has an owner (a lease
  that expired but that nobody took over still lets its owner append: appends are fenced by
  epoch, not by time), and only after reading again every run written since the references
  were computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._errors import JournalError, RunNotFoundError
from ..journal import AnyEvent, ToolResult, check_run_id
from ._schema import check_schema_name as check_schema_name
from ._store import PostgresStore

RunRemoval = Literal["removed", "held", "unfinished", "missing"]

LOCK_TIMEOUT = 10.0
"""Seconds to wait for the lock on ``runs`` before giving up on collecting blobs."""


async def remove_run(store: PostgresStore, run_id: str) -> RunRemoval:
    """Delete finished run ``run_id`` with its events and inbox, unless a worker holds it.

    Returns ``"removed"``; ``"held"`` (a live lease: kept); ``"unfinished"`` (kept: only
    finished runs are removed here); ``"missing"`` (no such run, perhaps removed meanwhile).
    """
    check_run_id(run_id)
    s = store.sql.schema
    async with store.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            f"SELECT status, owner IS NOT NULL AND expires_at > now() FROM {s}.runs "
            "WHERE run_id = $1 FOR UPDATE",
            run_id,
        )
        if row is None:
            return "missing"
        status, held = row
        if held:
            return "held"
        if status == "active":
            return "unfinished"
        deleted = await conn.fetchval(store.sql.delete_run, run_id)
    return "removed" if deleted is not None else "held"


async def run_versions(store: PostgresStore) -> dict[str, int]:
    """Every run's ``next_seq``: it changes whenever events are appended to the run."""
    rows = await store.pool.fetch(f"SELECT run_id, next_seq FROM {store.sql.schema}.runs")
    return {r[0]: r[1] for r in rows}


async def blob_sizes(store: PostgresStore) -> dict[str, int]:
    """Every stored blob's digest and size in bytes, by digest."""
    rows = await store.pool.fetch(
        f"SELECT digest, octet_length(data) FROM {store.sql.schema}.blobs ORDER BY digest"
    )
    return {r[0]: r[1] for r in rows}


def blob_refs(events: Iterable[AnyEvent]) -> set[str]:
    """The digests of the blobs ``events`` refer to."""
    return {e.blob.digest for e in events if isinstance(e, ToolResult) and e.blob is not None}


@dataclass
class BlobRemoval:
    """What ``remove_blobs`` did: the blobs it deleted, or why it deleted none."""

    removed: dict[str, int] = field(default_factory=dict)
    """Digest -> size in bytes of every blob deleted."""
    held: list[str] = field(default_factory=list)
    """Runs that had an owner: nothing was deleted (one of them may refer to a candidate next)."""
    unreadable: list[str] = field(default_factory=list)
    """Runs written since the references were computed that cannot be read: nothing deleted."""
    lock_timeout: bool = False
    """The lock on ``runs`` could not be had in time: nothing was deleted."""


async def remove_blobs(
    store: PostgresStore,
    candidates: Iterable[str],
    versions: Mapping[str, int],
    *,
    lock_timeout: float = LOCK_TIMEOUT,
) -> BlobRemoval:
    """Delete the ``candidates`` that no run refers to, if no run has an owner.

    ``candidates`` were found unreferenced by reading every run after ``versions``
    (``run_versions``) was taken. Under a ``SHARE`` lock on ``runs`` (no claim, append, release
    or run deletion can happen meanwhile), the runs whose version changed, and new ones, are
    read again; a candidate one of them refers to is kept.
    """
    import asyncpg

    s = store.sql.schema
    outcome = BlobRemoval()
    wanted = set(candidates)
    if not wanted:
        return outcome
    async with store.pool.acquire() as conn:
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}")
                await conn.execute(f"LOCK TABLE {s}.runs IN SHARE MODE")
                rows = await conn.fetch(
                    f"SELECT run_id, next_seq, owner IS NOT NULL FROM {s}.runs ORDER BY run_id"
                )
                outcome.held = [r[0] for r in rows if r[2]]
                if outcome.held:
                    return outcome
                for run_id, version, _ in rows:
                    if versions.get(run_id) == version:
                        continue
                    try:  # on another connection: it sees what was committed before the lock
                        wanted -= blob_refs(await store.read(run_id))
                    except RunNotFoundError:  # pragma: no cover - the lock keeps every run
                        continue
                    except JournalError:
                        outcome.unreadable.append(run_id)
                if outcome.unreadable:
                    return outcome
                gone = await conn.fetch(
                    f"DELETE FROM {s}.blobs WHERE digest = ANY($1::text[]) "
                    "RETURNING digest, octet_length(data)",
                    sorted(wanted),
                )
        except asyncpg.LockNotAvailableError:
            outcome.lock_timeout = True
            return outcome
    outcome.removed = dict(sorted((r[0], r[1]) for r in gone))
    return outcome
