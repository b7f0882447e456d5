"""``PostgresStore``: runs in one PostgreSQL database, shared by workers on many machines.

A worker holds a run through a lease: ``owner``, ``epoch`` and ``expires_at`` in the run's row.
Claiming is one conditional ``UPDATE`` (free or expired by the database's clock -> epoch + 1);
a timer renews every held lease in one statement, independent of slow tools and model calls;
closing a run releases it. Every append names its epoch in the same statement as the insert
(``_schema.Sql.append``), so a worker whose lease was taken over cannot write, and
``PgJournal.fence`` stops it before it runs a tool.

Decisions for a run another worker holds wait in the ``inbox`` table; a ``NOTIFY`` wakes the
workers' sweeps (which also run on their interval, should a notification be missed).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, final
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec

from .._errors import (
    BlobError,
    JournalCorruptError,
    JournalLockedError,
    RunExistsError,
    RunNotFoundError,
    StoreSchemaError,
)
from ..journal._blobs import SUMMARY_CHARS
from ..journal._protocols import RunStat
from ..journal._records import AnyEvent, BlobRef, Event, decode_event, encode_event
from ..journal._redact import Redactor, SecretRedactor
from ..journal._runid import check_run_id
from ..journal._store import DEFAULT_BLOB_THRESHOLD, prepare_event
from ._journal import PgJournal, stamp
from ._schema import SCHEMA_VERSION, Sql

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("tether.postgres")

_DEFAULT = object()
LISTEN_KEEPALIVE = 5.0
_READ_MANY = 500  # runs per statement of read_many: bounds one result set
SESSION_SETTINGS = {"default_transaction_isolation": "read committed"}
"""The fencing relies on READ COMMITTED's re-check of an updated row, whatever the database's
default isolation is."""


def connection_errors() -> tuple[type[BaseException], ...]:
    """Errors after which a statement's outcome is unknown (the connection or server went)."""
    import asyncpg

    return (
        OSError,
        asyncio.TimeoutError,
        asyncpg.InterfaceError,
        asyncpg.PostgresConnectionError,
        asyncpg.exceptions.OperatorInterventionError,  # admin/crash shutdown, query cancelled
        asyncpg.exceptions.CannotConnectNowError,
        # "cannot switch to state 12": the connection's protocol state went wrong under a
        # statement (one cut off mid-flight), so its outcome is as unknown as after a drop.
        asyncpg.exceptions.InternalClientError,
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
    ) -> None:
        if lease_ttl <= 0:
            raise ValueError("lease_ttl must be positive")
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
        self._display = _display(dsn)
        self._pool: asyncpg.Pool[Any] | None = None
        self._held: dict[str, PgJournal | None] = {}
        self._taken: dict[str, list[int]] = {}
        self._change = anyio.Event()
        self._stack: AsyncExitStack | None = None
        self._entered = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> PostgresStore:
        import asyncpg

        async with AsyncExitStack() as stack:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                command_timeout=None,
                reset=_keep_session,
                server_settings=SESSION_SETTINGS,
            )
            stack.push_async_callback(self._close_pool)
            await self._migrate()
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            tg.start_soon(self._renewer, name="tether-lease-renewer")
            tg.start_soon(self._listener, name="tether-change-listener")
            self._stack = stack.pop_all()
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release every run this store holds, stop its tasks, close the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
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
        return self._entered and not self._closed

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        if self._pool is None:
            raise RuntimeError(
                "the PostgresStore is closed"
                if self._closed
                else "use the PostgresStore as an async context manager first"
            )
        return self._pool

    async def _migrate(self) -> None:
        """Create the schema, or bring it to ``SCHEMA_VERSION``; refuse a newer one."""
        sql = self.sql
        if not self.create_schema:
            await self._check_schema()
            return
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(sql.migration_lock, f"tether-schema-{sql.schema}")
            await conn.execute(sql.create_schema)
            await conn.execute(sql.create_meta)
            value = await conn.fetchval(sql.get_version)
            current = int(value) if value is not None else 0
            if current > SCHEMA_VERSION:
                raise StoreSchemaError(
                    f"{self._display} schema {sql.schema!r} is at version {current}; this "
                    f"tether knows up to {SCHEMA_VERSION}: upgrade tether"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                await conn.execute(sql.migrations[version])
                await conn.execute(sql.set_version, str(version))
                log.info("schema %s migrated to version %d", sql.schema, version)

    async def _check_schema(self) -> None:
        """Refuse a missing schema, or one at another version (``create=False``)."""
        sql = self.sql
        where = f"{self._display} schema {sql.schema!r}"
        exists = await self.pool.fetchval("SELECT to_regclass($1)", f"{sql.schema}.meta")
        if exists is None:
            raise StoreSchemaError(f"{where} holds no tether store (is the schema name right?)")
        value = await self.pool.fetchval(sql.get_version)
        current = int(value) if value is not None else 0
        if current != SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{where} is at version {current}; this tether uses {SCHEMA_VERSION}: "
                + ("upgrade tether" if current > SCHEMA_VERSION else "start a worker to migrate it")
            )

    # ------------------------------------------------------------------ the Store protocol

    def where(self, run_id: str) -> str:
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
            stamped, payloads, finished = stamp(self.where(run_id), prepared, 0)
            if payloads:
                if not await self._create_with_events(run_id, payloads, finished):
                    raise RunExistsError(run_id)
            else:
                with _settled():
                    epoch = await self.pool.fetchval(
                        self.sql.create_run, run_id, self.owner, self.lease_ttl
                    )
                if epoch is None:
                    raise RunExistsError(run_id)
        except BaseException:
            self._held.pop(run_id, None)
            raise
        journal = self._held[run_id] = PgJournal(self, run_id, 1, stamped)
        await _hand_over(journal)
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
            journal = await self._claim(run_id)
        except BaseException:
            self._held.pop(run_id, None)
            raise
        self._held[run_id] = journal
        await _hand_over(journal)
        return journal

    async def _claim(self, run_id: str) -> PgJournal:
        """Claim and read; through a dropped connection or a restart, try again (a claim
        that did land is this owner's, and claiming it again only moves the epoch on)."""
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while True:
            started = time.monotonic()
            try:
                # One attempt is not cancelled half way: a claim that landed while its caller
                # went away would hold the run, with no handle to renew or release it.
                with _settled():
                    async with self.pool.acquire() as conn:
                        epoch = await conn.fetchval(
                            self.sql.claim,
                            run_id,
                            self.owner,
                            self.lease_ttl,
                            timeout=self.statement_timeout,
                        )
                        if epoch is None:
                            if await conn.fetchval(self.sql.exists, run_id) is None:
                                raise RunNotFoundError(run_id)
                            raise JournalLockedError(self.where(run_id))
                        rows = await conn.fetch(self.sql.read, run_id)
                        try:
                            events = self._decode(run_id, rows)
                        except JournalCorruptError:
                            await conn.execute(self.sql.release, run_id, epoch, self.owner, False)
                            raise
            except connection_errors():
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            journal = PgJournal(self, run_id, epoch, events)
            journal.valid_until = started + self.lease_ttl
            return journal

    def _check_local(self, run_id: str) -> None:
        if self._closed:
            raise RuntimeError("the PostgresStore is closed")
        if run_id in self._held:  # held by another task of this process
            raise JournalLockedError(self.where(run_id))

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
        events: list[AnyEvent] = []
        for expected, (seq, payload) in enumerate(rows):
            if seq != expected:
                raise JournalCorruptError(
                    self.where(run_id), seq, expected, f"rows skip from seq {expected} to {seq}"
                )
            try:
                event = decode_event(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise JournalCorruptError(
                    self.where(run_id), seq, seq, f"payload does not decode: {exc}"
                ) from None
            if event.seq != seq:
                raise JournalCorruptError(
                    self.where(run_id), seq, seq, f"row seq {seq} holds event seq {event.seq}"
                )
            events.append(event)
        return events

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

    async def run_versions(self) -> dict[str, tuple[tuple[int, int], str | None]]:
        """Every run with its version and the worker holding its live lease (``None``: nobody).

        The version, ``(next_seq, epoch)``, changes whenever the run is appended to or claimed:
        a listing that keeps what it read by version reads only the runs that changed.
        """
        rows = await self._retry("fetch", self.sql.run_versions)
        return {r[0]: ((r[1], r[2]), r[3]) for r in rows}

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

        Raises:
            RunNotFoundError: there is no such run.
        """
        check_run_id(run_id)
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(self.sql.exists, run_id) is None:
                raise RunNotFoundError(run_id)
            await conn.execute(self.sql.post, run_id, encode_event(event))
            await conn.execute(self.sql.notify, self.sql.channel, run_id)

    async def take_inbox(self, run_id: str) -> list[AnyEvent]:
        rows = await self._retry("fetch", self.sql.take_inbox, run_id)
        self._taken[run_id] = [r[0] for r in rows]
        return [decode_event(r[1]) for r in rows]

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
        await self._change.wait()

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
        self, journal: PgJournal, first: int, payloads: list[bytes], finished: str | None
    ) -> bool:
        """Run the fenced append; ``False`` if it was rejected (stale epoch).

        When the connection drops with the statement in flight, reconnect and read the rows to
        learn whether it committed; send it again (fenced) only if it did not.
        """
        args = (journal.run_id, journal.epoch, self.owner, first, payloads, finished)
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            backend: list[int] = []
            try:
                status = await self._send(backend, self.sql.append, *args)
            except _unique_violation():
                return False  # another writer has these seqs: we are not the owner any more
            except connection_errors() as exc:
                log.warning("run %s: connection lost during an append (%s)", journal.run_id, exc)
                # The statement may still be running on its server process (waiting for the
                # row lock, say): end that process first, so what we read next is final.
                await self._end_backend(backend, deadline)
                landed = await self._learn(journal.run_id, first, payloads)
                if landed is not None:
                    return landed
                if time.monotonic() > deadline:
                    raise
                continue  # it never took effect: send it again, fenced as ever
            if status != "INSERT 0 0":
                return True
            # Rejected. If an earlier attempt of this same group landed after all, it is ours.
            return bool(await self._learn(journal.run_id, first, payloads))

    async def _create_with_events(
        self, run_id: str, payloads: list[bytes], finished: str | None
    ) -> bool:
        """Insert the run and its first events; ``False`` if the run exists (someone else's).

        A dropped connection is settled as for appends: end the old server process, read the
        rows, send again only if nothing landed.
        """
        args = (run_id, self.owner, self.lease_ttl, payloads, finished)
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            backend: list[int] = []
            try:
                status = await self._send(backend, self.sql.create_run_with_events, *args)
            except connection_errors() as exc:
                log.warning("run %s: connection lost while creating it (%s)", run_id, exc)
                await self._end_backend(backend, deadline)
                landed = await self._learn(run_id, 0, payloads)
                if landed is not None:
                    return landed
                if time.monotonic() > deadline:
                    raise
                continue
            return status != "INSERT 0 0"

    async def _send(self, backend: list[int], query: str, *args: Any) -> str:
        """Execute ``query`` on a pooled connection, noting its server process id first."""
        with _settled():
            async with self.pool.acquire() as conn:
                backend.append(conn.get_server_pid())
                status: str = await conn.execute(query, *args, timeout=self.statement_timeout)
        return status

    async def _end_backend(self, backend: list[int], deadline: float) -> None:
        """Terminate the server process that ran a statement whose outcome is unknown."""
        if not backend:
            return
        try:
            await self._retry("fetchval", self.sql.terminate, backend[0])
        except connection_errors():
            if time.monotonic() > deadline:
                raise

    async def _learn(self, run_id: str, first: int, payloads: list[bytes]) -> bool | None:
        """Whether a group is in the database: True (all, equal), False (other data), None."""
        end = first + len(payloads)
        rows = await self._retry("fetch", self.sql.read_range, run_id, first, end)
        if not rows:
            return None
        return [bytes(r[1]) for r in rows] == payloads

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
        try:
            row = await self.pool.fetchrow(self.sql.lease_of, journal.run_id)
        except connection_errors():
            return f"append at epoch {journal.epoch} rejected"
        if row is None:
            return "the run was removed"
        owner, epoch, _next = row
        holder = owner or "nobody"
        return f"held by {holder} at epoch {epoch}; this worker had epoch {journal.epoch}"

    async def renew(self, journals: list[PgJournal]) -> None:
        """Extend the leases of ``journals`` in one statement; mark the refused ones lost."""
        if not journals:
            return
        started = time.monotonic()
        rows = await self.pool.fetch(
            self.sql.renew,
            self.owner,
            self.lease_ttl,
            [j.run_id for j in journals],
            [j.epoch for j in journals],
            timeout=self.statement_timeout,
        )
        renewed = {r[0] for r in rows}
        for journal in journals:
            if journal.run_id in renewed:
                journal.valid_until = started + self.lease_ttl
            elif journal.active:  # (a handle closed meanwhile released its lease itself)
                journal.mark_lost(f"renewal at epoch {journal.epoch} refused")

    async def release(self, journal: PgJournal) -> None:
        """Give the run up (unless it was lost), and notify if an answer was recorded."""
        if self._held.get(journal.run_id) is journal:
            del self._held[journal.run_id]
        if journal.lost:
            return
        try:
            await self.pool.execute(
                self.sql.release,
                journal.run_id,
                journal.epoch,
                self.owner,
                journal.answered,
                timeout=self.statement_timeout,
            )
        except connection_errors() as exc:
            # The lease runs out by itself; this owner may also claim it again before then.
            log.warning("run %s: could not release its lease (%s)", journal.run_id, exc)

    # ------------------------------------------------------------------ background tasks

    async def _renewer(self) -> None:
        while True:
            await anyio.sleep(self.lease_ttl / 3)
            held = [j for j in self._held.values() if j is not None and j.active]
            try:
                await self.renew(held)
            except Exception as exc:  # never take the host down: fence() asks again later
                log.warning("lease renewal failed (%s); retrying", exc)

    async def _listener(self) -> None:
        """LISTEN for changes on a connection of its own; reconnect when it drops."""
        import asyncpg

        def notified(*_args: object) -> None:
            self._change.set()
            self._change = anyio.Event()

        while True:
            try:
                conn = await asyncpg.connect(self.dsn, server_settings=SESSION_SETTINGS)
            except Exception as exc:  # sweeps still find every change, later
                log.warning("cannot listen for changes (%s); sweeps still run", exc)
                await anyio.sleep(LISTEN_KEEPALIVE)
                continue
            try:
                await conn.add_listener(self.sql.channel, notified)
                while True:
                    await anyio.sleep(LISTEN_KEEPALIVE)
                    await conn.execute("SELECT 1")
            except Exception as exc:
                log.warning("change listener disconnected (%s); reconnecting", exc)
                notified()  # something may have changed while nobody listened
            finally:
                conn.terminate()


def _settled() -> anyio.CancelScope:
    """Around one statement that takes a lease, from taking a pooled connection to giving it
    back: it finishes (within the statement timeout) before a cancellation is delivered, so
    the caller knows whether it holds the run."""
    return anyio.CancelScope(shield=True)


async def _hand_over(journal: PgJournal) -> None:
    """Give ``journal`` to its caller, unless the caller was cancelled meanwhile: then release
    the lease it will never use (a stopping supervisor must not leave runs locked)."""
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        await journal.aclose()
        raise


async def _keep_session(conn: asyncpg.Connection[Any]) -> None:
    """Pool connections change no session state (no LISTEN, SET or session locks), so the
    default reset query, one more round trip per checkout, is skipped; asyncpg still rolls back
    a transaction left open."""


def _unique_violation() -> type[BaseException]:
    import asyncpg

    return asyncpg.exceptions.UniqueViolationError


def _display(dsn: str) -> str:
    """The DSN without its user and password, for messages (any host list is kept as is)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "postgresql"
    if not parts.scheme:
        return "postgresql"
    hosts = parts.netloc.rpartition("@")[2] or "localhost"
    return f"{parts.scheme}://{hosts}{parts.path}"
