"""Appending to a journal: the async ``FileJournal`` handle and its thread-side file.

Invariants kept here (numbered as in docs/design.md):

- ``append`` returns only after the group's bytes, and the file size when it changed, are
  ``fdatasync``'d (docs/design.md invariant 2).
- A write or sync error poisons the handle for good: ``JournalBrokenError`` from then on, never
  a retry (invariant 3). Reopening re-reads what is really on disk.
- The handle holds an exclusive ``flock`` on the file from open to close (invariant 6, locally).
  A journal removed or replaced while held breaks its handle (``JournalRemovedError``) at its
  next batch instead of taking writes (``check_named``; the store's ``_watch`` says when).

Space after the data is preallocated with zeros in growing chunks, so that most appends
overwrite blocks the filesystem already has and ``fdatasync`` has no size change to journal.
The reader treats an all-zero frame header as the end of data. Close trims the zeros again, so a
parked run's journal is exactly as long as its data.

A failed write or sync cuts the file back to the last acknowledged end before the handle is
poisoned (``JournalFile.cut_back``), on the threads and on the ring alike: no group that was
refused to its appender can be read back as valid when the journal is reopened.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, final

import anyio

from .._errors import (
    JournalBrokenError,
    JournalClosedError,
    JournalLockedError,
    JournalRemovedError,
    RecordTooLargeError,
    RunExistsError,
    RunNotFoundError,
)
from ._commit import GroupCommitter
from ._events import EventsView
from ._file import FileOps
from ._format import HEADER_SIZE, MAX_PAYLOAD, encode_group, encode_header
from ._leftovers import keep_torn_tail
from ._reader import Scan, scan
from ._records import ENCODER, AnyEvent, Event, ToolResult
from ._stamp import stamp_in_place
from ._target import CommitTarget

if TYPE_CHECKING:
    import asyncio

PREALLOC_MIN = 16 * 1024
PREALLOC_MAX = 1024 * 1024
LARGE_WRITE = 64 * 1024
"""Writes at least this large extend the file exactly: zero-filling ahead would double their I/O
for a saving (one metadata flush) that is small next to the data itself."""

Prepare = Callable[[Event], tuple[Event, bytes | None]]
"""Redacts an event; gives with it the encoded content to move to the blob store, if any."""
ToBlob = Callable[[ToolResult, bytes], Awaitable[Event]]
"""Moves a tool result's content (encoded) to the blob store, durably; gives the new event."""
Screen = Callable[[bytes, list[int]], bool]
"""Whether a group framed from events as they were given, ``(group, payload sizes)``, is what
preparing them first would frame: nothing in it to redact, nothing for the blob store."""


class JournalFile(CommitTarget):
    """The blocking, thread-side half of an open journal (one descriptor, one lock); what the
    group commit shares with the event loop is described in ``CommitTarget``."""

    def __init__(self, path: str, fd: int, ops: FileOps, end: int, alloc_end: int) -> None:
        super().__init__(fd, ops)
        self.path = path
        self.end = end
        self.alloc_end = alloc_end
        self.syncs = 0
        self.watched = False  # a store's watch tells this file when its name goes (``_watch``)
        self.suspect = False  # set by that watch: the name was removed or replaced

    def plan_write(self, data: bytes) -> tuple[bytes, int, int]:
        """What to write for ``data``: the bytes (with zeros ahead when the preallocated space
        runs out), where, and the allocated end once written."""
        need = self.end + len(data)
        if need <= self.alloc_end:
            return data, self.end, self.alloc_end
        if len(data) >= LARGE_WRITE:
            return data, self.end, need
        grow = min(max(self.alloc_end - HEADER_SIZE, PREALLOC_MIN), PREALLOC_MAX)
        return data + bytes(grow), self.end, need + grow

    def written(self, end: int, alloc_end: int) -> None:
        self.end = end
        self.alloc_end = alloc_end
        self.syncs += 1

    def check_named(self) -> None:
        """Before a batch is written: raise ``JournalRemovedError`` if the path no longer names
        this file (removed, or replaced), so that nothing goes into a file nobody will read
        while a new run of the same id may live in another.

        Looks (an ``fstat`` and a ``stat``) only when the store's watch saw the name change,
        or when there is no watch: see ``_watch`` for why not before every batch.
        """
        if self.watched and not self.suspect:
            return
        if not self.ops.same_file(self.fd, self.path):
            raise JournalRemovedError(self.path)
        self.suspect = False

    def cut_back(self) -> None:
        """After a failed write or sync: cut the file back to the last acknowledged end.

        A write that ran out of space can have put a whole group on disk while the zeros
        planned after it (preallocation) did not fit; reopened, that group would read as valid
        though it was never acknowledged, and its events would appear twice once the run
        appends them again. Best effort: the truncation is not synced (a failed sync is never
        retried), and an error here leaves the poisoned handle as it is.
        """
        with contextlib.suppress(OSError):
            self.ops.ftruncate(self.fd, self.end)
            self.alloc_end = self.end

    def close(self, *, trim: bool) -> None:
        """Trim the preallocated zeros when ``trim`` and healthy, then close.

        The trim is not synced: a crash that loses it leaves zeros after the data, which the
        reader takes as the end of data, and the next open trims them again.
        """
        try:
            if trim and self.failed is None and self.alloc_end > self.end:
                self.ops.ftruncate(self.fd, self.end)
                self.alloc_end = self.end
        finally:
            self.ops.close(self.fd)


def frame_events(
    events: list[Event], first_seq: int, path: str, at: float | None = None
) -> tuple[list[AnyEvent], bytes]:
    """Stamp ``events`` (``stamp``) and frame them as one group, each encoded straight into
    the group's buffer (``encode_group``). ``events`` is the caller's own list, stamped in
    place and returned: an append in flight holds one list of its events, not two.

    Raises:
        RecordTooLargeError: an encoded event exceeds the frame limit.
    """
    stamped, group, sizes = frame_unchecked(events, first_seq, at)
    check_sizes(sizes, path)
    return stamped, group


def frame_unchecked(
    events: list[Event], first_seq: int, at: float | None = None
) -> tuple[list[AnyEvent], bytes, list[int]]:
    """``frame_events`` without the frame limit: the group and each payload's size."""
    stamped = stamp_in_place(events, first_seq, at)
    group, sizes = encode_group(stamped, ENCODER.encode_into)
    return stamped, group, sizes


def frame_as_given(
    events: list[Event], first_seq: int, path: str, at: float | None, screen: Screen | None
) -> tuple[list[AnyEvent], bytes] | None:
    """``frame_events`` of ``events`` as given, where the ``screen`` says from their bytes that
    preparing them (redaction, the blob store) would change nothing; ``None`` where they must
    be prepared first (no screen, the screen refuses, or they cannot be framed as given: the
    careful way then says why, as it always did). Nearly every group holds no secret and no
    large result, and the screen tells so at less than preparing each event costs.

    Raises:
        RecordTooLargeError: an encoded event exceeds the frame limit.
    """
    if screen is None:
        return None
    try:
        stamped, group, sizes = frame_unchecked(events, first_seq, at)
        as_given = screen(group, sizes)
    except Exception:  # not one group before its results go to the blob store, or not
        return None  # encodable
    if not as_given:
        return None
    check_sizes(sizes, path)
    return stamped, group


def check_sizes(sizes: list[int], path: str) -> None:
    """Raise ``RecordTooLargeError`` for a payload past the frame limit."""
    for size in sizes:
        if size > MAX_PAYLOAD:
            raise RecordTooLargeError(path, size, MAX_PAYLOAD)


def broken_error(path: str, cause: BaseException) -> JournalBrokenError:
    """The error an append raises once ``cause`` has poisoned the handle, naming ``cause``."""
    if isinstance(cause, JournalRemovedError):
        return JournalRemovedError(path)
    return JournalBrokenError(path, cause)


def journal_path(runs_dir: str, run_id: str) -> str:
    return os.path.join(runs_dir, f"{run_id}.journal")


def create_file(
    runs_dir: str, run_id: str, ops: FileOps, first: bytes = b"", dir_fd: int | None = None
) -> JournalFile:
    """Create a run's journal atomically: it appears complete and durable, or not at all.

    The header and ``first`` (a framed group, or nothing) are written and fsync'd in a file
    without a name yet, which is then linked to its final name (``link`` fails if the name
    exists, so two creators cannot both win) and the directory is fsync'd before anything is
    acknowledged. A run created with its first events so costs one file sync, not two.

    With ``dir_fd`` (``runs_dir`` open; see ``open_runs_dir``) the file is an ``O_TMPFILE``:
    a creator killed before the link leaves nothing behind. Without it, the file starts under
    a temporary name that is unlinked after the link (a leftover is removed on a later start).
    """
    if dir_fd is not None:
        return _create_unnamed(runs_dir, run_id, ops, first, dir_fd)
    path = journal_path(runs_dir, run_id)
    tmp = os.path.join(runs_dir, f".{run_id}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = ops.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    tmp_exists = True
    try:
        end, alloc_end = _write_first(fd, run_id, ops, first)
        try:
            ops.link(tmp, path)
        except FileExistsError:
            raise RunExistsError(run_id) from None
        finally:
            tmp_exists = False
            ops.unlink(tmp)
        ops.fsync_dir(runs_dir)
    except BaseException:
        if tmp_exists:  # a failed create must not block the next one under the same name
            with contextlib.suppress(OSError):
                ops.unlink(tmp)
        ops.close(fd)
        raise
    return JournalFile(path, fd, ops, end, alloc_end)


def _create_unnamed(
    runs_dir: str, run_id: str, ops: FileOps, first: bytes, dir_fd: int
) -> JournalFile:
    path = journal_path(runs_dir, run_id)
    fd = ops.open(runs_dir, os.O_RDWR | O_TMPFILE)
    try:
        end, alloc_end = _write_first(fd, run_id, ops, first)
        try:
            ops.link_fd(fd, dir_fd, os.path.basename(path))
        except FileExistsError:
            raise RunExistsError(run_id) from None
        ops.fsync_dir_fd(dir_fd, runs_dir)
    except BaseException:
        ops.close(fd)
        raise
    return JournalFile(path, fd, ops, end, alloc_end)


def _write_first(fd: int, run_id: str, ops: FileOps, first: bytes) -> tuple[int, int]:
    """Lock a new file, write its header, ``first`` and preallocated zeros, and fsync it.

    Returns the end of data and the end of the allocated space.
    """
    if not ops.lock(fd):  # pragma: no cover - a fresh private file cannot be locked
        raise JournalLockedError(f"<new journal of {run_id}>")
    end = HEADER_SIZE + len(first)
    ops.write_all(fd, encode_header(run_id) + first + bytes(PREALLOC_MIN), 0)
    ops.fsync(fd)
    return end, end + PREALLOC_MIN


O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)


def open_runs_dir(runs_dir: str, ops: FileOps) -> int | None:
    """``runs_dir`` open for ``create_file``, or ``None`` where unnamed files cannot be made
    there (no ``O_TMPFILE`` in this OS or filesystem, or no ``/proc/self/fd`` to link one)."""
    if not O_TMPFILE or not os.path.isdir("/proc/self/fd"):
        return None
    dir_fd = ops.open(runs_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        probe = ops.open(runs_dir, os.O_RDWR | O_TMPFILE)
    except OSError:
        ops.close(dir_fd)
        return None
    ops.close(probe)
    return dir_fd


def open_file(runs_dir: str, run_id: str, ops: FileOps) -> tuple[JournalFile, Scan]:
    """Lock and verify a run's journal; durably truncate a torn tail.

    Raises:
        RunNotFoundError: no journal for ``run_id``.
        JournalLockedError: another handle holds the lock.
        JournalCorruptError, JournalVersionError: what verification found.
    """
    path = journal_path(runs_dir, run_id)
    while True:
        try:
            fd = ops.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise RunNotFoundError(run_id) from None
        try:
            if not ops.lock(fd):
                raise JournalLockedError(path)
            named = ops.same_file(fd, path)
        except BaseException:
            ops.close(fd)
            raise
        if named:
            break
        # Removed or replaced between the open and the lock (``tether gc`` removes a journal
        # under its lock): this lock guards a file nobody opens any more.
        ops.close(fd)
    try:
        data = ops.read_all(fd)
        result = scan(data, path, expect_run_id=run_id)
        result.raise_if_corrupt(path)
        if result.damage is not None:
            keep_torn_tail(path, data, result.end, ops)
        if len(data) > result.end:
            ops.ftruncate(fd, result.end)
            ops.fsync(fd)
    except BaseException:
        ops.close(fd)
        raise
    return JournalFile(path, fd, ops, result.end, result.end), result


@final
class FileJournal:
    """An open, locked journal of one run. Create or open one through a ``FileStore``.

    ``events`` holds every event in the journal, in ``seq`` order: those found when it was
    opened and those appended since.
    """

    def __init__(
        self,
        *,
        run_id: str,
        file: JournalFile,
        committer: GroupCommitter,
        events: list[AnyEvent],
        prepare: Prepare | None = None,
        to_blob: ToBlob | None = None,
        screen: Screen | None = None,
        on_close: Callable[[FileJournal], Awaitable[None]] | None = None,
    ) -> None:
        self._run_id = run_id
        self._file = file
        self._committer = committer
        self._events = events
        self._view = EventsView(events)
        self._next_seq = len(events)
        self._landed: dict[int, list[AnyEvent]] = {}
        self._prepare = prepare
        self._to_blob = to_blob
        self._screen = screen
        self._on_close = on_close
        self._closed = False
        self._broken: BaseException | None = None
        self._inflight = 0
        self._drained: asyncio.Future[None] | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def events(self) -> EventsView:
        """Every durable event, oldest first: a read-only view that grows as appends land."""
        return self._view

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next appended event will get."""
        return self._next_seq

    @property
    def broken(self) -> bool:
        """Whether a failed write or sync has poisoned this handle."""
        return self._broken is not None

    @property
    def file(self) -> JournalFile:
        """The thread-side file this handle appends to."""
        return self._file

    @property
    def size(self) -> int:
        """Bytes of durable data in the file (header included)."""
        return self._file.end

    async def __aenter__(self) -> FileJournal:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def append(self, events: Iterable[Event], *, at: float | None = None) -> list[AnyEvent]:
        """Append ``events`` as one atomic group and return them stamped with ``seq`` and ``at``
        (an event's own, else ``at``, else now).

        Returns only when the group is durable. Concurrent appends to one journal are allowed:
        each gets a contiguous ``seq`` range in call order, and they may share one fsync.

        Raises:
            JournalBrokenError: this write or an earlier one failed; the handle is poisoned.
            JournalClosedError: the handle is closed.
            RecordTooLargeError: an encoded event exceeds the frame limit (nothing is written).

        On cancellation: the call raises at once, but a group already queued is still written;
        if it becomes durable it appears in ``events`` (and a failure still poisons the handle),
        and ``aclose`` waits for it. A cancellation while large payloads go to the blob store
        writes nothing.
        """
        self._check_writable()
        prepared: list[Event] = list(events)
        if not prepared:
            return []
        framed: tuple[list[AnyEvent], bytes] | None
        if self._prepare is None:
            framed = frame_events(prepared, self._next_seq, self.path, at)
        else:
            framed = frame_as_given(prepared, self._next_seq, self.path, at, self._screen)
            if framed is None:
                prepared = await self._prepared(prepared)
                # Numbered after the wait: another append may have taken numbers meanwhile.
                framed = frame_events(prepared, self._next_seq, self.path, at)
        stamped, group = framed
        del framed  # (kept across the wait, it is one more object the collector meets)
        # The group's fate is recorded by ``_settle`` when it is known, whether or not anyone
        # still waits: cancelling this call cancels only the wait.
        fut = self._committer.submit(self._file, group, _Landing(self, stamped))
        self._next_seq += len(stamped)
        self._inflight += 1
        try:
            await fut
        except Exception as exc:  # a cancellation (a BaseException) propagates as it is
            raise broken_error(self.path, exc) from exc
        return stamped

    async def _prepared(self, events: list[Event]) -> list[Event]:
        assert self._prepare is not None
        moved = False
        for i, event in enumerate(events):
            events[i], data = self._prepare(event)
            if data is not None:
                if self._to_blob is None:
                    raise RuntimeError("a large tool result, and no blob store to put it in")
                events[i] = await self._to_blob(events[i], data)  # type: ignore[arg-type]
                moved = True
        if moved:  # the handle may have been closed or poisoned meanwhile
            self._check_writable()
        return events

    async def fence(self) -> None:
        """Nothing to check: the ``flock`` lasts as long as this handle (and its process)."""

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Never calls ``callback``: the ``flock`` is not lost while this handle is open."""

    @property
    def lapsed(self) -> bool:
        """Always ``False``: a ``flock`` is not lost while its process lives."""
        return False

    @property
    def taken_from(self) -> str:
        """Always ``""``: a directory store's run is taken only once its holder is gone."""
        return ""

    def _settle(self, stamped: list[AnyEvent], error: BaseException | None) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if error is not None:
            self._broken = self._broken or error
            return
        # Concurrent appends can be acknowledged in either order; ``events`` only ever grows by
        # the contiguous, durable prefix, in seq order.
        self._landed[stamped[0].seq] = stamped
        while (ready := self._landed.pop(len(self._events), None)) is not None:
            self._events.extend(ready)

    def _check_writable(self) -> None:
        if self._closed:
            raise JournalClosedError(self.path)
        if self._broken is not None:
            raise broken_error(self.path, self._broken) from self._broken

    async def aclose(self) -> None:
        """Trim preallocated space, release the lock and close the file. Idempotent.

        Errors while trimming are raised (after the descriptor is closed and the lock freed).

        On cancellation: closing is shielded and completes first.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._inflight:  # groups still syncing (maybe of cancelled appends): let them land
                import asyncio

                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
            try:
                await self._committer.run(lambda: self._file.close(trim=not self.broken))
            finally:
                if self._on_close is not None:
                    await self._on_close(self)


@final
class _Landing:
    """Tells a handle the fate of one of its groups (a ``Settle``): one object per append in
    flight, where a ``functools.partial`` of a bound method was three."""

    __slots__ = ("_journal", "_stamped")

    def __init__(self, journal: FileJournal, stamped: list[AnyEvent]) -> None:
        self._journal = journal
        self._stamped = stamped

    def __call__(self, error: BaseException | None) -> None:
        self._journal._settle(self._stamped, error)
