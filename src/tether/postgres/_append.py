"""Writing a group through a connection that may drop: fenced, then settled by reading.

An append (and the creation of a run with its first events) is one statement. When the
connection drops with it in flight, its outcome is unknown: the server process that ran it is
ended first (it may still wait for the row lock), then the rows are read to learn whether the
group committed; it is sent again, still fenced, only if nothing landed. It is never sent
again without looking.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ._connection import connection_errors, unique_violation

if TYPE_CHECKING:
    from ._journal import PgJournal
    from ._parts import StoreParts

log = logging.getLogger("tether.postgres")


async def append_rows(
    store: StoreParts,
    journal: PgJournal,
    first: int,
    payloads: list[bytes],
    finished: str | None,
    *,
    unless_queued: bool = False,
) -> bool | None:
    """Run the fenced append; ``False`` if it was rejected (stale epoch). With
    ``unless_queued``, under the lock of the run's inbox and only if no answer waits there
    (``None``: none was sent, or, sent again, it found one).

    When the connection drops with the statement in flight, reconnect and read the rows to
    learn whether it committed; send it again (fenced) only if it did not.
    """
    args = (journal.run_id, journal.epoch, store.owner, first, payloads, finished)
    deadline = time.monotonic() + store.reconnect_timeout
    while True:
        backend: list[int] = []
        try:
            if unless_queued:
                sent = await store._send_unless_queued(
                    backend, journal.run_id, store.sql.append, *args
                )
                if sent is None:
                    return None
                status = sent
            else:
                status = await store._send(backend, store.sql.append, *args)
        except unique_violation():
            return False  # another writer has these seqs: we are not the owner any more
        except connection_errors() as exc:
            log.warning("run %s: connection lost during an append (%s)", journal.run_id, exc)
            # The statement may still be running on its server process (waiting for the
            # row lock, say): end that process first, so what we read next is final.
            await _end_backend(store, backend, deadline)
            landed = await _learn(store, journal.run_id, first, payloads)
            if landed is not None:
                return landed
            if time.monotonic() > deadline:
                raise
            continue  # it never took effect: send it again, fenced as ever
        if status != "INSERT 0 0":
            return True
        # Rejected. If an earlier attempt of this same group landed after all, it is ours.
        return bool(await _learn(store, journal.run_id, first, payloads))


async def create_with_events(
    store: StoreParts, run_id: str, payloads: list[bytes], finished: str | None
) -> bool:
    """Insert the run and its first events; ``False`` if the run exists (someone else's).

    A dropped connection is settled as for appends: end the old server process, read the
    rows, send again only if nothing landed.
    """
    args = (run_id, store.owner, store.lease_ttl, payloads, finished)
    deadline = time.monotonic() + store.reconnect_timeout
    while True:
        backend: list[int] = []
        try:
            status = await store._send(backend, store.sql.create_run_with_events, *args)
        except connection_errors() as exc:
            log.warning("run %s: connection lost while creating it (%s)", run_id, exc)
            await _end_backend(store, backend, deadline)
            landed = await _learn(store, run_id, 0, payloads)
            if landed is not None:
                return landed
            if time.monotonic() > deadline:
                raise
            continue
        return status != "INSERT 0 0"


async def _end_backend(store: StoreParts, backend: list[int], deadline: float) -> None:
    """Terminate the server process that ran a statement whose outcome is unknown."""
    if not backend:
        return
    try:
        await store._retry("fetchval", store.sql.terminate, backend[0])
    except connection_errors():
        if time.monotonic() > deadline:
            raise


async def _learn(store: StoreParts, run_id: str, first: int, payloads: list[bytes]) -> bool | None:
    """Whether a group is in the database: True (all, equal), False (other data), None."""
    end = first + len(payloads)
    rows = await store._retry("fetch", store.sql.read_range, run_id, first, end)
    if not rows:
        return None
    return [bytes(r[1]) for r in rows] == payloads
