"""``PostgresStore``: runs in one PostgreSQL database, shared by workers on many machines.

A worker holds a run through a lease: ``owner``, ``epoch`` and ``expires_at`` in the run's row.
Claiming is one conditional ``UPDATE`` (free or expired by the database's clock -> epoch + 1);
a timer renews every held lease in one statement, independent of slow tools and model calls;
closing a run releases it. Every append names its epoch in the same statement as the insert
(``_schema.Sql.append``), so a worker whose lease was taken over cannot write, and
``PgJournal.fence`` stops it before it runs a tool.

Decisions for a run another worker holds wait in the ``inbox`` table; a ``NOTIFY`` wakes the
workers' sweeps (which also run on their interval, should a notification be missed).

Where the rest is: ``_lease`` (claim, renew, release), ``_append`` (a write through a
connection that drops, settled by reading), ``_listen`` (the change listener), ``_schema``
(tables, statements, migrations), ``_connection`` (what counts as a lost connection),
``_startup`` (waiting for the database when the store opens).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, final
from urllib.parse import urlsplit

import anyio
import msgspec

from .._errors import (
    BlobError,
    JournalCorruptError,
    JournalIOError,
    JournalLockedError,
    RunExistsError,
    RunNotFoundError,
)
from ..journal import (
    AnyEvent,
    BlobRef,
    Event,
    JournalHandle,
    Redactor,
    RunStat,
    SecretRedactor,
    check_run_id,
)
from ..journal._backend import (
    DEFAULT_BLOB_THRESHOLD,
    SUMMARY_CHARS,
    SharedEntry,
    prepare_event,
    queueable,
    still_queueing,
)
from ..journal._records import decode_event
from . import _append, _lease
from ._connection import SESSION_SETTINGS, connection_errors, display, keep_session
from ._journal import PgJournal, decode_rows, stamp
from ._listen import Changes
from ._schema import Sql, check_schema, migrate
from ._startup import connect

if TYPE_CHECKING:
    import asyncpg

_DEFAULT = object()
POSTING_PATIENCE = 10.0  # seconds an answer waits for another one to be queued
POSTING_POLL = 0.005
_READ_MANY = 500  # runs per statement of read_many: bounds one result set
_ONE_TASK = (
    "this PostgresStore is open in another task (its lease renewer and change listener run "
    "in the task that entered it first, which must be the one to close it): give each "
    "supervisor that runs at the same time a PostgresStore of its own (they may share the "
    "database and the schema), or enter them one after another"
)


@final
class PostgresStore:
    """Runs in a PostgreSQL database, each held by one worker at a time through a lease.

    Use as an async context manager: it opens a connection pool, creates or migrates its
    schema, and starts the lease renewer and the change listener; on exit it releases every
    run it holds.

    Args:
        dsn: a libpq connection string or URL, ``postgresql://user@host:port/dbname``.
        schema: the PostgreSQL schema holding tether's tables (created if missing).
        lease_ttl: seconds a lease lasts without renewal; renewed every third of it. A worker
            that stops (crash, pause, lost network) loses its runs this long after.
        pool_size: connections in the pool (appends of different runs go in parallel).
        blob_threshold: tool results larger than this (encoded) go to the ``blobs`` table.
        redact: applied to every event before it is encoded (default ``SecretRedactor``).
        owner: this store's name in the leases (default: host, pid and a random tag).
        reconnect_timeout: how long an append whose connection dropped keeps trying to learn
            its outcome before the handle is declared broken.
        create: create the schema if missing and migrate an older one (workers); ``False``
            requires it to exist at this version and changes nothing (operator tools), so a
            mistyped schema name is an error rather than a new, empty store.
        start_wait: how long entering the store waits for a database that cannot be reached
            yet (down, starting up or in recovery, out of connection slots, a host name that
            does not resolve yet), trying again with backoff and logging what it waits for;
            then ``StoreUnavailableError``. ``0`` tries once. Mistakes (a wrong password, no
            such database, a newer schema) fail at once.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "tether",
        lease_ttl: float = 30.0,
        pool_size: int = 16,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        redact: Redactor | Any | None = _DEFAULT,
        owner: str | None = None,
        reconnect_timeout: float = 30.0,
        create: bool = True,
        start_wait: float = 60.0,
    ) -> None:
        if lease_ttl <= 0:
            raise ValueError("lease_ttl must be positive")
        if not 0 <= start_wait < float("inf"):
            raise ValueError(f"start_wait must be 0 or more seconds, got {start_wait!r}")
        if "://" in dsn:
            urlsplit(dsn).port  # noqa: B018 - raises ValueError now on a malformed port
        self.dsn = dsn
        self.sql = Sql(schema)
        self.lease_ttl = lease_ttl
        self.pool_size = pool_size
        self.blob_threshold = blob_threshold
        self.reconnect_timeout = reconnect_timeout
        self.create_schema = create
        self.statement_timeout = max(reconnect_timeout, 1.0)
        """Seconds a lease statement may take before its outcome counts as unknown (a silent,
        half-open connection would otherwise hang it forever)."""
        self._redact: Redactor | None = SecretRedactor() if redact is _DEFAULT else redact
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._display = display(dsn)
        self._pool: asyncpg.Pool[Any] | None = None
        self._held: dict[str, PgJournal | None] = {}
        self._taken: dict[str, list[int]] = {}
        self._adverts: dict[str, bytes] = {}  # this store's advertisements, renewed
        self.start_wait = start_wait
        self._changes = Changes(dsn, self.sql.channel)
        self._stack: AsyncExitStack | None = None
        self._entry = SharedEntry(self._start, self._stop, one_task=_ONE_TASK)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> PostgresStore:
        """Open the store (the first entry) or count one more holder (see ``journal._shared``).

        The first entry waits for a database that cannot be reached yet (``start_wait``);
        a store closed before opens again.

        Raises:
            StoreUnavailableError: still unreachable after ``start_wait`` seconds.
            StoreSchemaError: the schema is newer than this tether (or, with ``create=False``,
                missing or older).
            asyncpg errors that waiting does not cure (a wrong password, no such database),
                at once.

        On cancellation: leaves nothing open.
        """
        await self._entry.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._entry.leave()

    async def _start(self) -> None:
        self._changes = Changes(self.dsn, self.sql.channel)  # (its event is this loop's)
        async with AsyncExitStack() as stack:
            where = f"{self._display} (schema {self.sql.schema})"
            self._pool = await connect(self._open_pool, where=where, wait=self.start_wait)
            stack.push_async_callback(self._close_pool)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            tg.start_soon(_lease.renew_held, self, self._held.values, name="tether-lease-renewer")
            tg.start_soon(self._changes.listen, name="tether-change-listener")
            self._stack = stack.pop_all()

    async def _open_pool(self) -> asyncpg.Pool[Any]:
        """One try: a pool, and the schema created, migrated or checked."""
        import asyncpg

        pool = asyncpg.create_pool(
            self.dsn,
            min_size=1,
            max_size=self.pool_size,
            command_timeout=None,
            reset=keep_session,
            server_settings=SESSION_SETTINGS,
        )
        try:
            await pool
            if self.create_schema:
                await migrate(pool, self.sql, self._display)
            else:
                await check_schema(pool, self.sql, self._display)
        except BaseException:
            pool.terminate()
            raise
        return pool

    async def aclose(self) -> None:
        """Release every run this store holds, stop its tasks, close the pool, whoever still
        holds the store. Idempotent; entering the store again opens it again."""
        await self._entry.aclose()

    async def _stop(self) -> None:
        with anyio.CancelScope(shield=True):
            for journal in list(self._held.values()):
                if journal is not None:
                    await journal.aclose()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()  # stops the renewer and the listener, closes the pool

    async def _close_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def entered(self) -> bool:
        """Whether the store is open for use (entered and not closed)."""
        return self._entry.open

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        if self._pool is None:
            raise RuntimeError(self._not_open())
        return self._pool

    def _not_open(self) -> str:
        if self._entry.closed_once:
            return "the PostgresStore is closed (enter it again to use it)"
        return "use the PostgresStore as an async context manager first"

    # ------------------------------------------------------------------ the Store protocol

    def location(self, run_id: str) -> str:
        return f"{self._display}/{self.sql.schema}/{run_id}"

    async def create(self, run_id: str, events: Iterable[Event] = ()) -> PgJournal:
        """Create run ``run_id``, held by this store, with ``events`` as its first group.

        The run and its first events are committed together when this returns.

        Raises:
            InvalidRunIdError, RunExistsError.
        """
        check_run_id(run_id)
        self._check_local(run_id)
        self._held[run_id] = None
        try:
            prepared = [await self.prepare(ev) for ev in events]
            stamped, payloads, finished = stamp(self.location(run_id), prepared, 0)
            if payloads:
                if not await _append.create_with_events(self, run_id, payloads, finished):
                    raise RunExistsError(run_id)
            else:
                with _lease.settled():
                    epoch = await self.pool.fetchval(
                        self.sql.create_run, run_id, self.owner, self.lease_ttl
                    )
                if epoch is None:
                    raise RunExistsError(run_id)
        except BaseException:
            self._held.pop(run_id, None)
            raise
        journal = self._held[run_id] = PgJournal(self, run_id, 1, stamped)
        await _lease.hand_over(journal)
        return journal

    async def open(self, run_id: str) -> PgJournal:
        """Claim run ``run_id`` (free, or its lease expired) and read it.

        Raises:
            InvalidRunIdError, RunNotFoundError, JournalCorruptError.
            JournalLockedError: another worker holds the run (its lease is live).
        """
        check_run_id(run_id)
        self._check_local(run_id)
        self._held[run_id] = None
        try:
            journal = await _lease.claim(self, run_id)
        except BaseException:
            self._held.pop(run_id, None)
            raise
        self._held[run_id] = journal
        await _lease.hand_over(journal)
        return journal

    def _check_local(self, run_id: str) -> None:
        if not self._entry.open:
            raise RuntimeError(self._not_open())
        if run_id in self._held:  # held by another task of this process
            raise JournalLockedError(self.location(run_id))

    async def read(self, run_id: str) -> list[AnyEvent]:
        """Every committed event of ``run_id``, without claiming it.

        Raises:
            InvalidRunIdError, RunNotFoundError, JournalCorruptError.
        """
        check_run_id(run_id)
        rows = await self._retry("fetch", self.sql.read, run_id)
        if not rows and not await self.exists(run_id):
            raise RunNotFoundError(run_id)
        return self._decode(run_id, rows)

    def _decode(self, run_id: str, rows: list[Any]) -> list[AnyEvent]:
        return decode_rows(self.location(run_id), rows)

    async def list_runs(self) -> list[str]:
        return [r[0] for r in await self._retry("fetch", self.sql.list_runs)]

    async def exists(self, run_id: str) -> bool:
        check_run_id(run_id)
        return await self._retry("fetchval", self.sql.exists, run_id) is not None

    async def run_stats(self) -> dict[str, RunStat]:
        """Unfinished runs this store could hold (free, expired or its own), with versions.

        Runs another live worker holds are left out: their owner folds their inbox.
        """
        rows = await self._retry("fetch", self.sql.run_stats, self.owner)
        return {r[0]: RunStat((r[1], r[2]), r[3]) for r in rows}

    async def run_versions(self) -> dict[str, tuple[tuple[int, int], str | None, int | None]]:
        """Every run with its version, the worker holding its live lease (``None``: nobody)
        and its newest queued answer's id (``None``: none waits).

        The version, ``(next_seq, epoch)``, changes whenever the run is appended to or claimed,
        the inbox's whenever an answer is queued or cleared: a listing that keeps what it read
        by version reads only the runs that changed.
        """
        rows = await self._retry("fetch", self.sql.run_versions)
        return {r[0]: ((r[1], r[2]), r[3], r[4]) for r in rows}

    async def read_many(
        self, run_ids: Sequence[str]
    ) -> dict[str, list[AnyEvent] | JournalCorruptError]:
        """The committed events of each of ``run_ids``, a few hundred runs per statement.

        A run whose rows are damaged maps to its ``JournalCorruptError`` (the others are read
        as usual); a run without events, or without a row at all, maps to ``[]``.

        Raises:
            InvalidRunIdError: one of ``run_ids`` is not a run id.
        """
        for run_id in run_ids:
            check_run_id(run_id)
        rows_of: dict[str, list[Any]] = {run_id: [] for run_id in run_ids}
        ids = list(rows_of)
        for start in range(0, len(ids), _READ_MANY):
            chunk = ids[start : start + _READ_MANY]
            for run_id, seq, payload in await self._retry("fetch", self.sql.read_many, chunk):
                rows_of[run_id].append((seq, payload))
        out: dict[str, list[AnyEvent] | JournalCorruptError] = {}
        for run_id, rows in rows_of.items():
            try:
                out[run_id] = self._decode(run_id, rows)
            except JournalCorruptError as exc:
                out[run_id] = exc
        return out

    async def holder(self, run_id: str) -> str | None:
        """The worker whose lease on the run is live (by the database's clock), if any."""
        owner: str | None = await self._retry("fetchval", self.sql.holder, run_id)
        return owner

    async def has_inbox(self, run_id: str) -> bool:
        return bool(await self._retry("fetchval", self.sql.has_inbox, run_id))

    async def post(self, run_id: str, event: Event) -> None:
        """Queue ``event`` for a run another worker holds; notify the workers.

        The event is redacted first, as a journal's are, and refused if the journal could not
        hold it.

        Raises:
            RunNotFoundError: there is no such run.
            RecordTooLargeError: the event is larger than a journal frame (nothing written).
        """
        check_run_id(run_id)
        async with self.pool.acquire() as conn, conn.transaction():
            await self._post_chosen(conn, run_id, lambda _events, _queued: event, read=False)

    async def post_checked(
        self,
        run_id: str,
        choose: Callable[[list[AnyEvent], list[AnyEvent]], Event | None],
    ) -> Event | None:
        """Queue the answer ``choose`` picks, given the run's journal and the answers queued
        for it, in one transaction under an advisory lock on the run's inbox, which every
        checked post takes: nothing is queued for the run in between (the lock goes with the
        transaction, whatever ends it). The inbox is read before the journal: an answer its
        holder took from the inbox since was in the journal first. The lock is tried every
        ``POSTING_POLL`` seconds on a connection taken for each try, so that answers waiting
        for one run hold none of the pool's, and given up after ``POSTING_PATIENCE``.

        Raises:
            RunNotFoundError: there is no such run.
            JournalIOError: another answer kept the run's inbox for ``POSTING_PATIENCE`` s.
            whatever ``choose`` raises; RecordTooLargeError: as ``post``.
        """
        check_run_id(run_id)
        deadline = time.monotonic() + POSTING_PATIENCE
        while True:
            async with self.pool.acquire() as conn, conn.transaction():
                if await conn.fetchval(self.sql.lock_inbox, self.sql.inbox_key(run_id)):
                    return await self._post_chosen(conn, run_id, choose)
            self._wait_over(run_id, deadline, "queue an answer")
            await anyio.sleep(POSTING_POLL)

    def _wait_over(self, run_id: str, deadline: float, doing: str) -> None:
        """Refuse, naming the wait, an answer that waited for the run's inbox past
        ``deadline``: another answer kept it (a process paused while it queued one)."""
        if time.monotonic() >= deadline:
            stuck = still_queueing(POSTING_PATIENCE)
            raise JournalIOError(self.location(run_id), doing, stuck)

    async def append_unless_queued(
        self, journal: JournalHandle, events: Sequence[Event], *, at: float | None = None
    ) -> list[AnyEvent] | None:
        """Append ``events`` to ``journal`` (a run this store holds) in one transaction with
        the lock of the run's inbox, the one ``post_checked`` takes, unless answers wait
        there (``None``: nothing appended). Lock, look and append share one connection, and
        the lock goes with the transaction: a pool of one connection is enough, and a caller
        cancelled leaves nothing locked. The lock is tried as ``post_checked`` tries it.

        Raises:
            JournalIOError: another answer kept the run's inbox for ``POSTING_PATIENCE`` s
                (nothing appended).
            whatever ``PgJournal.append`` raises.
        """
        if not isinstance(journal, PgJournal) or self._held.get(journal.run_id) is not journal:
            raise ValueError(f"{journal.path} is not a run this PostgresStore holds")
        return await journal.append_unless_queued(events, at=at)

    async def _send_unless_queued(
        self, backend: list[int], run_id: str, query: str, *args: Any
    ) -> str | None:
        """``_send``, in one transaction that first takes the lock of the run's inbox and
        looks in it: ``None`` (nothing sent) if answers wait there. The lock is tried every
        ``POSTING_POLL`` seconds on a connection taken for each try, as ``post_checked``
        tries it, and given up after ``POSTING_PATIENCE`` (``JournalIOError``)."""
        deadline = time.monotonic() + POSTING_PATIENCE
        while True:
            with _lease.settled():
                async with self.pool.acquire() as conn, conn.transaction():
                    if await conn.fetchval(self.sql.lock_inbox, self.sql.inbox_key(run_id)):
                        if await conn.fetchval(self.sql.has_inbox, run_id):
                            return None
                        backend.append(conn.get_server_pid())
                        status: str = await conn.execute(
                            query, *args, timeout=self.statement_timeout
                        )
                        return status
            self._wait_over(run_id, deadline, "record an answer")
            await anyio.sleep(POSTING_POLL)

    async def _post_chosen(
        self,
        conn: Any,
        run_id: str,
        choose: Callable[[list[AnyEvent], list[AnyEvent]], Event | None],
        *,
        read: bool = True,
    ) -> Event | None:
        """Queue what ``choose`` picks, in ``conn``'s transaction (``post_checked``'s, its
        lock held; ``post``'s, which reads nothing for it: ``read=False``)."""
        if await conn.fetchval(self.sql.exists, run_id) is None:
            raise RunNotFoundError(run_id)
        queued, events = [], []
        if read:
            queued = [decode_event(r[1]) for r in await conn.fetch(self.sql.take_inbox, run_id)]
            events = self._decode(run_id, await conn.fetch(self.sql.read, run_id))
        event = choose(events, queued)
        if event is None:
            return None
        if self._redact is not None:  # secrets never reach a table, the inbox included
            event = self._redact(event)
        await conn.execute(self.sql.post, run_id, queueable(event, self.location(run_id)))
        await conn.execute(self.sql.notify, self.sql.channel, run_id)
        return event

    async def take_inbox(self, run_id: str) -> list[AnyEvent]:
        rows = await self._retry("fetch", self.sql.take_inbox, run_id)
        self._taken[run_id] = [r[0] for r in rows]
        return [decode_event(r[1]) for r in rows]

    async def advertise(self, key: str, data: bytes | None) -> None:
        """Keep ``data`` under ``key`` in the ``workers`` table, renewed with this store's
        leases, while it runs (``None``: take it back): what a worker can run, for the others
        (see ``supervisor._fleet``)."""
        if data is None:
            self._adverts.pop(key, None)
            await self._retry("execute", self.sql.withdraw, key)
            return
        self._adverts[key] = data
        await self._retry("execute", self.sql.advertise, key, data, self.lease_ttl * 2)

    async def renew_adverts(self) -> None:
        """Keep this store's advertisements alive (with its leases' renewal)."""
        if self._adverts:
            await self._retry(
                "execute", self.sql.renew_adverts, list(self._adverts), self.lease_ttl * 2
            )

    async def advertised(self) -> dict[str, bytes]:
        """Every live worker's advertisement (renewed within twice the lease), by key."""
        rows = await self._retry("fetch", self.sql.advertised)
        return {r[0]: bytes(r[1]) for r in rows}

    async def peek_inbox(self, run_id: str) -> list[AnyEvent]:
        """The answers waiting for the run, oldest first, without taking them."""
        rows = await self._retry("fetch", self.sql.take_inbox, run_id)
        return [decode_event(r[1]) for r in rows]

    async def inbox_versions(self, run_ids: Collection[str]) -> dict[str, Hashable]:
        """Of ``run_ids``, those with answers waiting, each with its newest answer's id (one
        statement, however many runs)."""
        if not run_ids:
            return {}
        rows = await self._retry("fetch", self.sql.inbox_versions, list(run_ids))
        return {r[0]: r[1] for r in rows}

    async def clear_inbox(self, run_id: str, count: int) -> None:
        """Drop the first ``count`` answers ``take_inbox`` returned (by id: safe to repeat),
        only while this store still holds the run (the answers are in its journal then)."""
        ids = self._taken.pop(run_id, [])[:count]
        journal = self._held.get(run_id)
        if ids and journal is not None:
            await self._retry(
                "execute", self.sql.clear_inbox, ids, run_id, self.owner, journal.epoch
            )

    async def load_blob(self, ref: BlobRef) -> Any:
        data = await self._retry("fetchval", self.sql.get_blob, ref.digest)
        if data is None:
            raise BlobError(ref.digest, f"missing from {self._display}/{self.sql.schema}.blobs")
        if hashlib.sha256(data).hexdigest() != ref.digest:
            raise BlobError(ref.digest, "content does not match its digest")
        return msgspec.msgpack.decode(data)

    async def changed(self) -> None:
        """Return at the next notification: an answer was queued or recorded somewhere."""
        await self._changes.wait()

    # ------------------------------------------------------------------ used by PgJournal

    async def prepare(self, event: Event) -> Event:
        return await prepare_event(
            event, redact=self._redact, blob_threshold=self.blob_threshold, put_blob=self._put_blob
        )

    async def _put_blob(self, data: bytes, summary: str) -> BlobRef:
        digest = hashlib.sha256(data).hexdigest()
        await self._retry("execute", self.sql.put_blob, digest, data, summary[:SUMMARY_CHARS])
        return BlobRef(digest=digest, size=len(data), summary=summary[:SUMMARY_CHARS])

    async def append_rows(
        self,
        journal: PgJournal,
        first: int,
        payloads: list[bytes],
        finished: str | None,
        *,
        unless_queued: bool = False,
    ) -> bool | None:
        """Run the fenced append; ``False`` if it was rejected (stale epoch); with
        ``unless_queued``, ``None`` if answers wait in the run's inbox. A dropped connection
        is settled by reading what landed (see ``_append``)."""
        return await _append.append_rows(
            self, journal, first, payloads, finished, unless_queued=unless_queued
        )

    async def _send(self, backend: list[int], query: str, *args: Any) -> str:
        """Execute ``query`` on a pooled connection, noting its server process id first (the
        one way a write that must be settled reaches the database)."""
        with _lease.settled():
            async with self.pool.acquire() as conn:
                backend.append(conn.get_server_pid())
                status: str = await conn.execute(query, *args, timeout=self.statement_timeout)
        return status

    async def _retry(self, method: str, query: str, *args: Any) -> Any:
        """Run an idempotent ``query`` until the database answers (up to ``reconnect_timeout``).

        ``method`` is the pool's: ``fetch``, ``fetchval`` or ``execute``.
        """
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        run = getattr(self.pool, method)
        while True:
            try:
                return await run(query, *args)
            except connection_errors():
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def why_rejected(self, journal: PgJournal) -> str:
        return await _lease.why_rejected(self, journal)

    async def renew(self, journals: list[PgJournal]) -> None:
        """Extend the leases of ``journals`` in one statement; mark the refused ones lost."""
        await _lease.renew(self, journals)

    async def release(self, journal: PgJournal) -> None:
        """Give the run up (unless it was lost), and notify if an answer was recorded."""
        if self._held.get(journal.run_id) is journal:
            del self._held[journal.run_id]
        if journal.lost:
            return
        await _lease.release(self, journal)
