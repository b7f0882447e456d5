"""The systems the journal benchmark writes through: tether and the baselines it has to beat.

Each ``measure_*`` function writes ``case.record_size``-byte records for one window in a fresh
directory and returns how many became durable. A "record" of N bytes is one encoded
``tool_result`` event of about N bytes for tether, and N bytes written for the baselines.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os
import anyio

from ..journal import FileStore, SecretRedactor, ToolResult
from ..journal._records import encode_event
from ._cases import Case
from ._timing import Sample, Window, run_tasks, run_threads


def measure(case: Case, root: Path, window: Window) -> Sample:
    """Run one case in a fresh directory under ``root`` and remove the directory afterwards.

    Raises:
        OSError: a write, sync or file operation failed (the disk is full, say).
    """
    workdir = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    try:
        if case.kind in ("tether", "tether-threads"):
            return anyio.run(measure_tether, case, workdir, window)
        if case.kind == "aiofiles":
            return anyio.run(measure_aiofiles, case, workdir, window)
        if case.kind == "plain":
            return measure_plain(case, workdir, window)
        if case.kind == "handoff":
            return anyio.run(measure_handoff, case, workdir, window)
        return measure_sqlite(case, workdir, window)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- tether --------------------------------------------------------------------------------------


@functools.cache
def tool_result(size: int) -> ToolResult:
    """A ``ToolResult`` whose encoding (with a realistic ``seq`` and ``at``) is ``size`` bytes."""
    n = size
    while True:
        ev = ToolResult(call_id="call-0", ok=True, content="x" * n, seq=100_000, at=time.time())
        over = len(encode_event(ev)) - size
        if over <= 0:
            return ToolResult(call_id="call-0", ok=True, content="x" * n)
        n -= over


async def measure_tether(case: Case, root: Path, window: Window) -> Sample:
    """``FileJournal.append`` of ``case.group`` events at a time, from ``case.appenders`` tasks on
    each of ``case.writers`` journals (no blobs: the records stay inline)."""
    redact = SecretRedactor() if case.redact else None
    ring = case.kind == "tether"  # "tether-threads": appends on the writer threads
    async with FileStore(root, redact=redact, blob_threshold=1 << 30, io_uring=ring) as store:
        journals = [await store.create(f"run-{i}") for i in range(case.writers)]
        group = [tool_result(case.record_size)] * case.group
        steps = [
            functools.partial(j.append, group) for j in journals for _ in range(case.appenders)
        ]
        sample = await run_tasks(steps, window, case.group)
        for j in journals:
            await j.aclose()
    return sample


# --- a plain loop, and aiofiles ------------------------------------------------------------------


def _write_and_sync(fd: int, data: bytes) -> None:
    os.write(fd, data)
    os.fdatasync(fd)


def measure_plain(case: Case, root: Path, window: Window) -> Sample:
    """``os.write`` + ``os.fdatasync`` per record on a growing ``O_APPEND`` file, a thread each:
    the cost of durability with no framing, checksums or event loop."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    fds = [os.open(root / f"plain-{i}", flags, 0o644) for i in range(case.writers)]
    data = b"x" * case.record_size
    try:
        steps = [functools.partial(_write_and_sync, fd, data) for fd in fds]
        return run_threads(steps, window, 1)
    finally:
        for fd in fds:
            os.close(fd)


async def measure_aiofiles(case: Case, root: Path, window: Window) -> Sample:
    """``write`` + ``flush`` + ``fdatasync`` per record, each hop through the default executor,
    as an async application would do without a writer of its own."""
    fdatasync = aiofiles.os.wrap(os.fdatasync)
    data = b"x" * case.record_size
    files = [await aiofiles.open(root / f"aio-{i}", "ab") for i in range(case.writers)]

    def step(f: Any) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            await f.write(data)
            await f.flush()
            await fdatasync(f.fileno())

        return write

    try:
        return await run_tasks([step(f) for f in files], window, 1)
    finally:
        for f in files:
            await f.close()


# --- the bare thread hand-off --------------------------------------------------------------------


class _Handoff:
    """One file and one long-lived thread that writes, syncs and wakes the loop per record."""

    CHUNK = 1 << 20

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.loop = loop
        self.queue: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]] | None]
        self.queue = queue.SimpleQueue()
        self.end = self.allocated = 0
        self.thread = threading.Thread(target=self._work)
        self.thread.start()

    async def append(self, data: bytes) -> None:
        fut = self.loop.create_future()
        self.queue.put((data, fut))
        await fut

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            data, fut = item
            while self.end + len(data) > self.allocated:  # zeros ahead, as tether preallocates
                os.pwrite(self.fd, bytes(self.CHUNK), self.allocated)
                self.allocated += self.CHUNK
            os.pwrite(self.fd, data, self.end)
            self.end += len(data)
            os.fdatasync(self.fd)
            self.loop.call_soon_threadsafe(_resolve, fut)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        os.close(self.fd)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def measure_handoff(case: Case, root: Path, window: Window) -> Sample:
    """Each task hands raw bytes to a thread of its own (one per file, zero-filled space ahead
    like tether's), which writes, syncs and wakes the loop: no framing, checksum or batching.
    The least any design that keeps ``fdatasync`` off the event loop pays."""
    loop = asyncio.get_running_loop()
    data = b"x" * case.record_size
    writers = [_Handoff(root / f"handoff-{i}", loop) for i in range(case.writers)]
    try:
        return await run_tasks([functools.partial(w.append, data) for w in writers], window, 1)
    finally:
        for w in writers:
            w.close()


# --- SQLite, the design tether's journal replaced ------------------------------------------------

SQLITE_EVENTS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events ("
    "run_id TEXT, seq INTEGER, kind TEXT, payload BLOB, PRIMARY KEY (run_id, seq))"
)
"""The SQLite design tether's journal replaced: one table for every run's events, one row
per event (``run_id``, ``seq``, ``kind``, ``payload``)."""


def connect_sqlite_events(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection to the events database in WAL mode with ``synchronous=FULL`` (every commit
    synced), autocommit, usable from any thread, waiting up to 30 s for the write lock."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class _SqliteWriter:
    """One run's writer: one autocommit ``INSERT`` (one transaction, one WAL sync) per event."""

    def __init__(self, conn: sqlite3.Connection, run_id: str, payload: bytes) -> None:
        self.conn, self.run_id, self.payload, self.seq = conn, run_id, payload, 0

    def __call__(self) -> None:
        self.conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)",
            (self.run_id, self.seq, "tool_result", self.payload),
        )
        self.seq += 1


def measure_sqlite(case: Case, root: Path, window: Window) -> Sample:
    """One row per record in one WAL database, one connection and thread per writer."""
    path = root / "events.db"
    with closing(connect_sqlite_events(path)) as setup:
        setup.execute(SQLITE_EVENTS_SCHEMA)
    conns = [connect_sqlite_events(path) for _ in range(case.writers)]
    payload = b"x" * case.record_size
    try:
        steps = [_SqliteWriter(c, f"run-{i}", payload) for i, c in enumerate(conns)]
        return run_threads(steps, window, 1)
    finally:
        for c in conns:
            c.close()
