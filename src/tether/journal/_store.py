"""Where runs live on a local filesystem: ``FileStore``, one journal file per run.

It is a ``Store`` (``_protocols``): runs, their inboxes and their blobs.

Layout under the store's root (files 0600, directories 0700: they hold customer data)::

    runs/<run_id>.journal     one journal per run (a regular file: anything else is skipped)
    runs/<run_id>.inbox       answers queued while another process holds the run (``_inbox``)
    runs/<file>.torn-<n>      bytes cut off a journal or inbox, and ``.broken`` copies, kept
                              for a person (``_leftovers``)
    blobs/<aa>/<sha256>       large payloads, content-addressed

``FileStore`` claims a run with an exclusive ``flock`` on its journal: the kernel frees the lock
when the owning process dies, so another process on the machine can take the run over at once.

Every descriptor it opens is counted first against one budget derived from ``RLIMIT_NOFILE``
(``_descriptors``): a call that finds none free waits for one instead of failing with
``EMFILE``, and a shortage caused by the rest of the process is waited out and tried again
where that is safe.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, TypeVar, final

import anyio
import msgspec

from .._errors import JournalIOError, RunNotFoundError
from ._adverts import publish as publish_advert
from ._adverts import read_all as read_adverts
from ._adverts import withdraw as withdraw_advert
from ._blobs import FileBlobStore
from ._commit import GroupCommitter
from ._descriptors import Descriptors
from ._file import DEFAULT_FILE_OPS, FileOps, reaches_ring
from ._inbox import clear as clear_inbox
from ._inbox import empty as inbox_empty
from ._inbox import hold as hold_inbox
from ._inbox import inbox_path, post_chosen
from ._inbox import let_go as let_go_inbox
from ._inbox import post as post_inbox
from ._inbox import take as take_inbox
from ._listing import Listing, list_runs_dir
from ._protocols import JournalHandle, RunStat
from ._reader import scan_live
from ._records import ENCODER, AnyEvent, BlobRef, Event, ToolResult
from ._redact import Redactor, SecretRedactor
from ._runid import check_run_id
from ._shared import SharedEntry
from ._watch import RunsWatch, open_watch
from ._writer import (
    FileJournal,
    JournalFile,
    Screen,
    create_file,
    frame_as_given,
    frame_events,
    journal_path,
    open_file,
    open_runs_dir,
)

DEFAULT_BLOB_THRESHOLD = 64 * 1024
_Opened = TypeVar("_Opened")
log = logging.getLogger("tether.journal")
_DEFAULT = object()

_REPORTED: set[tuple[str, str]] = set()
"""The odd entries of ``runs/`` this process has warned of (each once, whatever the store)."""

INLINE_LOOKS = 64
"""Up to this many inboxes are looked at on the event loop (an ``lstat`` is a few µs); more
go to a thread."""


def prepare_now(
    event: Event, *, redact: Redactor | None, blob_threshold: int
) -> tuple[Event, bytes | None]:
    """Redact ``event``; with it, the encoded content of a tool result too large to keep in the
    journal (it goes to the blob store, durably, before the event is written), else ``None``.

    The part of preparing an event that needs no I/O: most events need nothing more, and an
    append costs no coroutine for them.
    """
    if redact is not None:
        event = redact(event)
    if isinstance(event, ToolResult) and event.blob is None and event.content is not None:
        data = ENCODER.encode(event.content)
        if len(data) > blob_threshold:
            return event, data
    return event, None


def screen_for(redact: Redactor | None, blob_threshold: int) -> Screen | None:
    """The screen (``_writer.Screen``) of groups framed before ``prepare_now``: a group none
    of whose payloads is larger than ``blob_threshold`` (so no tool result's content is: it is
    within its payload) and in which the redactor finds no hint of a secret is what preparing
    each event first would frame. ``None`` for a redactor that cannot tell from bytes (a
    function of your own, patterns of your own, a subclass of ``SecretRedactor``): then each
    event is prepared first."""
    if redact is None:
        may_change: Callable[[bytes], bool] = lambda data: False  # noqa: E731
    elif type(redact) is SecretRedactor and redact.screens:  # a subclass may redact more
        may_change = redact.may_change
    else:
        return None

    def screen(group: bytes, sizes: list[int]) -> bool:
        return max(sizes) <= blob_threshold and not may_change(group)

    return screen


async def to_blob(
    event: ToolResult, data: bytes, put_blob: Callable[[bytes, str], Awaitable[BlobRef]]
) -> Event:
    """``event`` with its content (encoded as ``data``) moved to the blob store, durably first."""
    ref = await put_blob(data, _summarize(event.content))
    return msgspec.structs.replace(event, content=None, blob=ref)


async def prepare_event(
    event: Event,
    *,
    redact: Redactor | None,
    blob_threshold: int,
    put_blob: Callable[[bytes, str], Awaitable[BlobRef]],
) -> Event:
    """Redact ``event``; move a large tool result's content to the blob store (durably first)."""
    event, data = prepare_now(event, redact=redact, blob_threshold=blob_threshold)
    if data is None:
        return event
    assert isinstance(event, ToolResult)
    return await to_blob(event, data, put_blob)


@final
class FileStore:
    """Journals and blobs in a directory on the local filesystem.

    Use as an async context manager: it starts the writer threads that make appends durable
    and, on exit, closes every journal still open and stops the threads.

    Args:
        root: the store's directory (created if missing).
        blob_threshold: a tool result whose encoded content is larger than this many bytes is
            written to the blob store and referenced from the journal.
        redact: applied to every event before it is encoded. Defaults to a ``SecretRedactor``;
            pass ``None`` to write events exactly as given.
        sync_threads: how many journals may fsync (or be opened, created, closed) at once.
        descriptors: how many file descriptors the store may have open at once; by default
            the soft ``RLIMIT_NOFILE`` less a quarter of it (at least 16 less), for the rest
            of the process. Opening a journal (creating a run, advancing one), reading one,
            listing runs, blobs and inboxes each wait for a free descriptor of this budget
            rather than fail (see ``tether.journal._descriptors``); ``Supervisor`` advances
            at most half as many runs at once as the budget holds journals by default.
        file_ops: the file layer (a fault-injecting one in tests).
        io_uring: append through Linux ``io_uring`` where the kernel allows it (x86-64 only),
            instead of handing each batch to a writer thread; ``file_ops`` is asked before
            each write and sync, so its faults apply (a layer whose writes or syncs the ring
            cannot follow keeps the threads: see ``FileOps``). The environment variable
            ``TETHER_IO_URING=0`` turns it off as well.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        redact: Redactor | Any | None = _DEFAULT,
        sync_threads: int = 16,
        file_ops: FileOps | None = None,
        io_uring: bool = True,
        descriptors: int | None = None,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.runs_dir = os.path.join(self.root, "runs")
        self._ops = file_ops or DEFAULT_FILE_OPS
        self.blobs = FileBlobStore(os.path.join(self.root, "blobs"), self._ops)
        self.blob_threshold = blob_threshold
        self._redact: Redactor | None = SecretRedactor() if redact is _DEFAULT else redact
        self._screen = screen_for(self._redact, blob_threshold)
        # The ring asks FileOps before each write and sync; a layer it cannot follow keeps
        # the appends on the threads.
        self._ring = io_uring and reaches_ring(self._ops)
        self._sync_threads = sync_threads
        self._committer = self._new_committer()
        self._open: set[FileJournal] = set()
        self.descriptors = Descriptors(descriptors)
        """The store's descriptor budget (``descriptors.journals``: journals open at once)."""
        self._dir_fd: int | None = None
        self._watch: RunsWatch | None = None
        self._adverts: dict[str, int] = {}  # this process's advertisements, by key
        self._created = 0
        self._syncs_before = 0  # made by the committers of earlier entries
        self._committer_used = False
        self._entry = SharedEntry(self._start, self._stop)

    def _new_committer(self) -> GroupCommitter:
        return GroupCommitter(threads=self._sync_threads, io_uring=self._ring)

    async def __aenter__(self) -> FileStore:
        """Open the store (the first entry) or count one more holder (see ``_shared``).

        A store closed before opens again: scripts, notebooks and tests enter one store in
        one ``Supervisor`` after another, or side by side; it closes when the last leaves.
        """
        await self._entry.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._entry.leave()

    async def _start(self) -> None:
        if self._committer_used:  # a committer is bound to one event loop: a new one
            self._syncs_before += self._committer.syncs
            self._committer = self._new_committer()
        self._committer_used = True
        self.descriptors.start()
        try:
            await anyio.to_thread.run_sync(self._prepare_dirs)
            self._committer.start()
            self._watch = open_watch(self.runs_dir)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stop()
            raise

    async def aclose(self) -> None:
        """Close every journal still open, then stop the writer threads, whoever still
        holds the store. Idempotent; entering the store again opens it again.

        On cancellation: shielded; every file is closed and every thread joined on return.
        """
        await self._entry.aclose()

    async def _stop(self) -> None:
        first_error: BaseException | None = None
        with anyio.CancelScope(shield=True):
            try:
                for journal in list(self._open):
                    try:
                        await journal.aclose()
                    except Exception as exc:  # close the others; report the first failure
                        first_error = first_error or exc
            finally:
                await self._committer.aclose()
                watch, self._watch = self._watch, None
                if watch is not None:
                    watch.close()
                if self._dir_fd is not None:
                    self._ops.close(self._dir_fd)
                    self._dir_fd = None
        if first_error is not None:
            raise first_error

    @property
    def syncs(self) -> int:
        """The syncs this store made for appends and creates (one file and one directory
        sync per run created), for benchmarks: opening, blobs and inboxes are not counted."""
        return self._syncs_before + self._committer.syncs + 2 * self._created

    @property
    def uses_io_uring(self) -> bool:
        """Whether appends go through ``io_uring`` (see ``io_uring`` above)."""
        return self._committer.uses_io_uring

    @property
    def entered(self) -> bool:
        """Whether the store is open for use (entered and not closed)."""
        return self._entry.open

    def _prepare_dirs(self) -> None:
        for path in (self.root, self.runs_dir, self.blobs.root):
            self._ops.make_dirs(path)
        for name in os.listdir(self.runs_dir):
            if name.startswith(".") and name.endswith(".tmp"):
                _remove_stale_tmp(os.path.join(self.runs_dir, name), self._ops)
        self._dir_fd = open_runs_dir(self.runs_dir, self._ops)

    def location(self, run_id: str) -> str:
        """The journal file of ``run_id`` (where the run lives, for messages too)."""
        return journal_path(self.runs_dir, check_run_id(run_id))

    async def create(self, run_id: str, events: Iterable[Event] = ()) -> FileJournal:
        """Create run ``run_id`` and open its journal for writing, with ``events`` (if any) as its
        first group.

        The run exists durably when this returns: header and first group written with one
        write and one sync before the journal gets its name, then the directory fsync'd. It
        never exists without those events, and a creator killed half-way leaves no file
        (where the filesystem supports ``O_TMPFILE``; elsewhere a temporary file that a later
        start removes).

        Raises:
            InvalidRunIdError: ``run_id`` is not a valid run id.
            RunExistsError: the run already exists.
            JournalIOError: the journal (or a blob of its first events) could not be written,
                a full disk say; the message carries the OS error. The run is absent or, when
                only the directory's sync failed, present with exactly its first events.
        """
        self._check_entered()
        check_run_id(run_id)
        path = journal_path(self.runs_dir, run_id)
        try:
            given = list(events)
            framed = frame_as_given(given, 0, path, None, self._screen)
            if framed is None:
                framed = frame_events([await self._prepare_event(ev) for ev in given], 0, path)
            stamped, group = framed
            first = group if stamped else b""
            file = await self._holding(
                "create a run",
                lambda: self._committer.run(
                    lambda: create_file(self.runs_dir, run_id, self._ops, first, self._dir_fd)
                ),
                # Without O_TMPFILE the directory is synced after the link: a run that exists
                # now is made, and must not be made again.
                safe=lambda: not os.path.lexists(path),
            )
        except OSError as exc:
            raise JournalIOError(path, "create the run", exc) from exc
        self._created += 1
        return self._wrap(run_id, file, stamped)

    async def open(self, run_id: str) -> FileJournal:
        """Open run ``run_id``'s journal for writing: lock it, verify it, recover a torn tail.

        Raises:
            InvalidRunIdError: ``run_id`` is not a valid run id.
            RunNotFoundError: there is no such run.
            JournalLockedError: another task or process has it open for writing.
            JournalCorruptError: damage with valid data after it; nothing was changed.
            JournalVersionError: written by a newer tether.
        """
        self._check_entered()
        check_run_id(run_id)
        file, result = await self._holding(
            "open a journal",
            lambda: self._committer.run(lambda: open_file(self.runs_dir, run_id, self._ops)),
        )
        return self._wrap(run_id, file, list(result.events))

    async def _holding(
        self,
        what: str,
        op: Callable[[], Awaitable[_Opened]],
        *,
        safe: Callable[[], bool] | None = None,
    ) -> _Opened:
        """``op()``, which opens a journal that stays open, under a journal token (given back
        when the journal closes, or now if ``op`` fails) and a short one (see ``_descriptors``).
        """
        await self.descriptors.take_journal()
        try:
            return await self.descriptors.using(what, op, safe=safe)
        except BaseException:
            self.descriptors.give_journal()
            raise

    async def read(self, run_id: str) -> list[AnyEvent]:
        """Every durable event of ``run_id``, without taking the write lock.

        If a writer is appending at the same time, an unfinished last group is left out.

        Raises:
            RunNotFoundError, JournalCorruptError, JournalVersionError.
            JournalIOError: the OS refused (no permission; not a regular file, a FIFO say,
                which is never waited on).
        """
        path = self.location(run_id)

        def _read() -> bytes:
            return self._read_file(run_id, path)

        result = await self.descriptors.using(
            "read a journal",
            lambda: anyio.to_thread.run_sync(lambda: scan_live(_read, path, expect_run_id=run_id)),
        )
        result.raise_if_corrupt(path)
        return result.events

    def _read_file(self, run_id: str, path: str) -> bytes:
        """The bytes of run ``run_id``'s journal at ``path`` (blocking).

        Raises:
            RunNotFoundError, JournalIOError.
        """
        try:
            fd = self._ops.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise RunNotFoundError(run_id) from None
        except OSError as exc:
            raise JournalIOError(path, "read", exc) from exc
        try:
            return self._ops.read_all(fd)
        except OSError as exc:
            raise JournalIOError(path, "read", exc) from exc
        finally:
            self._ops.close(fd)

    async def list_runs(self) -> list[str]:
        """Ids of every run in the store, sorted.

        A run is a regular file ``runs/<run_id>.journal``; other entries under such a name are
        left out (see ``odd_entries``) and logged once each.
        """
        return sorted((await self._listing()).runs)

    async def run_stats(self) -> dict[str, RunStat]:
        """Every run's ``(size, mtime_ns)`` as its version, and whether answers wait for it.

        The runs are those ``list_runs`` gives; odd entries are left out here too.
        """
        listing = await self._listing(versions=True)
        return {run_id: RunStat(v, run_id in listing.inboxes) for run_id, v in listing.runs.items()}

    async def odd_entries(self) -> dict[str, str]:
        """Entries of ``runs/`` named like a run's journal or inbox that are not regular files
        (no run is driven from them; the operator's listing shows each as needing attention),
        each with what it is: ``{"x.journal": "a FIFO"}``."""
        return (await self._listing()).odd

    async def _listing(self, *, versions: bool = False) -> Listing:
        return await self.descriptors.using(
            "list runs", lambda: anyio.to_thread.run_sync(lambda: self._look(versions=versions))
        )

    def _look(self, *, versions: bool = False) -> Listing:
        listing = list_runs_dir(self.runs_dir, versions=versions)
        for name, kind in listing.odd.items():
            path = os.path.join(self.runs_dir, name)
            if (path, kind) not in _REPORTED:  # once a process, not at every sweep or store
                _REPORTED.add((path, kind))
                what = (
                    "no run is driven from it (`tether runs` shows it as needing attention)"
                    if name.endswith(".journal")
                    else "no answer is read from it"
                )
                log.warning("%s is %s, not a regular file: skipped, %s", path, kind, what)
        return listing

    async def has_inbox(self, run_id: str) -> bool:
        """Whether answers wait in the run's inbox (a cheap ``stat``, done on the event loop)."""
        try:
            st = os.lstat(inbox_path(self.runs_dir, run_id))
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode) and not inbox_empty(st)

    async def changed(self) -> None:
        """Never returns: a file store learns of other processes' writes by sweeping."""
        await anyio.sleep_forever()

    def inbox_news(self) -> int:
        """How many times an inbox changed since the store opened its watch (0 without one):
        what to give ``inbox_changed`` as ``since``."""
        watch = self._watch
        return 0 if watch is None else watch.news

    async def inbox_changed(self, since: int | None = None) -> None:
        """Return when a run's inbox changed (an answer queued by another process, say), where
        the store watches its directory (Linux inotify, while the store is open; see
        ``tether.journal._watch``); otherwise never. With ``since`` (an ``inbox_news`` taken
        earlier), at once if an inbox changed since then. What a holder waits for to halt a
        run whose cancellation was queued (a sweep does not: it looks at its interval)."""
        watch = self._watch
        if watch is None:
            await anyio.sleep_forever()
        else:
            await watch.inbox_changed(since)

    async def post(self, run_id: str, event: Event) -> None:
        """Queue ``event`` (a decision, resolution or cancellation) in the run's inbox, durably.

        For a run whose journal another process holds: that process folds the inbox into the
        journal at its next pause (when it would otherwise rest). The event is redacted first,
        as a journal's are, and refused if the journal could not hold it.

        Raises:
            RunNotFoundError: there is no such run.
            RecordTooLargeError: the event is larger than a journal frame (nothing written).
            JournalIOError: the inbox could not be written (nothing queued).
        """
        if not await self.exists(run_id):
            raise RunNotFoundError(run_id)
        path = inbox_path(self.runs_dir, run_id)
        if self._redact is not None:  # secrets never reach a file, the inbox included
            event = self._redact(event)
        # Not tried again on a shortage: one that struck after the answer was written would
        # queue it twice. The sender is told, and nothing was acknowledged.
        async with self.descriptors.short():
            await anyio.to_thread.run_sync(post_inbox, path, run_id, event, self._ops)

    async def post_checked(
        self,
        run_id: str,
        choose: Callable[[list[AnyEvent], list[AnyEvent]], Event | None],
    ) -> Event | None:
        """Queue the answer ``choose`` picks, given the run's journal as it stands and the
        answers queued for it, with nothing else queued for the run in between (under its
        inbox's lock, which every post takes). ``choose`` refuses by raising (nothing is
        queued) or gives ``None`` to queue nothing. The inbox is read before the journal: an
        answer its holder took from the inbox since was in the journal first. Returns what was
        queued (redacted, as ``post`` writes it).

        Raises:
            RunNotFoundError: there is no such run.
            whatever ``choose`` raises; RecordTooLargeError, JournalIOError: as ``post``.
        """
        if not await self.exists(run_id):
            raise RunNotFoundError(run_id)
        path = self.location(run_id)
        redact = self._redact

        def pick(queued: list[AnyEvent]) -> Event | None:
            found = scan_live(lambda: self._read_file(run_id, path), path, expect_run_id=run_id)
            found.raise_if_corrupt(path)
            event = choose(found.events, queued)
            return event if event is None or redact is None else redact(event)

        inbox = inbox_path(self.runs_dir, run_id)
        async with self.descriptors.short():  # (the inbox's descriptor, and the journal's)
            return await anyio.to_thread.run_sync(post_chosen, inbox, run_id, pick, self._ops)

    async def append_unless_queued(
        self, journal: JournalHandle, events: Sequence[Event], *, at: float | None = None
    ) -> list[AnyEvent] | None:
        """Append ``events`` to ``journal`` (a run of this store, held) under the lock of the
        run's inbox, the one every post takes, unless answers wait there: then nothing is
        appended, and ``None`` returned. A post that comes meanwhile waits, and then reads
        the journal with them. An inbox there is none of is made to be locked, empty, and
        removed again (one a killed process leaves reads as none: ``_inbox.empty``).

        Raises:
            JournalIOError: the inbox stayed locked ``PATIENCE`` s (another answer being
                queued), or could not be read; nothing appended.
            whatever ``journal.append`` raises.
        """
        path = inbox_path(self.runs_dir, journal.run_id)
        async with self.descriptors.short():  # (the inbox's descriptor)
            held = await anyio.to_thread.run_sync(hold_inbox, path, journal.run_id, self._ops)
            written = None
            try:
                if not held.waiting:
                    # Held until the group's fate is known: a group still on its way when
                    # the lock went would let a post judge its answer without it.
                    with anyio.CancelScope(shield=True):
                        written = await journal.append(events, at=at)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(let_go_inbox, held, self._ops)
        return written

    async def take_inbox(self, run_id: str) -> list[AnyEvent]:
        """The events waiting in the run's inbox, oldest first."""
        path = inbox_path(self.runs_dir, run_id)
        return await self.descriptors.using(
            "read an inbox", lambda: anyio.to_thread.run_sync(take_inbox, path, run_id, self._ops)
        )

    async def peek_inbox(self, run_id: str) -> list[AnyEvent]:
        """The events waiting in the run's inbox, oldest first (reading takes nothing here)."""
        return await self.take_inbox(run_id)

    async def advertise(self, key: str, data: bytes | None) -> None:
        """Keep ``data`` under ``key`` in ``workers/`` while this process lives (``None``: take
        it back): what a worker can run, for the others (see ``supervisor._fleet``)."""
        folder = os.path.join(self.root, "workers")
        held = self._adverts.pop(key, None)
        if held is not None:
            with anyio.CancelScope(shield=True):  # popped: nothing else would ever close it
                await anyio.to_thread.run_sync(withdraw_advert, folder, key, held, self._ops)
        if data is not None:
            fd = await anyio.to_thread.run_sync(publish_advert, folder, key, data, self._ops)
            self._adverts[key] = fd

    async def advertised(self) -> dict[str, bytes]:
        """Every live worker's advertisement in ``workers/``, by key (a dead worker's file is
        removed: its lock went with its process)."""
        folder = os.path.join(self.root, "workers")
        return await anyio.to_thread.run_sync(read_adverts, folder, dict(self._adverts), self._ops)

    cheap_inbox_looks = True
    """``inbox_versions`` costs an ``lstat`` per run: a holder may look before every step
    (and, with the watch, need not while the run's ``inbox_mark`` stays put)."""

    def inbox_mark(self, run_id: str) -> Hashable | None:
        """A mark that moves whenever run ``run_id``'s inbox may have changed, while the store
        watches its directory (``None`` where it does not: only a look can tell). A look taken
        after the mark was ``m`` need not be taken again while the mark is ``m``; take the
        mark first. Changes reach the mark at the event loop's next poll."""
        watch = self._watch
        return None if watch is None else watch.inbox_mark(run_id)

    async def inbox_versions(self, run_ids: Collection[str]) -> dict[str, Hashable]:
        """Of ``run_ids``, those whose inbox holds answers, each with a version that changes
        when the inbox does (its size and modification time: one ``lstat`` per run)."""

        def look(dir_fd: int | None) -> dict[str, Hashable]:
            found: dict[str, Hashable] = {}
            for run_id in run_ids:
                where = inbox_path(self.runs_dir, run_id) if dir_fd is None else f"{run_id}.inbox"
                try:
                    st = os.lstat(where, dir_fd=dir_fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # any other error is the look's: it must not read as "none"
                if stat.S_ISREG(st.st_mode) and not inbox_empty(st):
                    found[run_id] = (st.st_size, st.st_mtime_ns, st.st_ino)
            return found

        if len(run_ids) <= INLINE_LOOKS:
            # On the event loop, which is also where the store closes its directory: the names
            # are looked up in the open ``runs/`` (a run's drive looks before each of its calls,
            # and the kernel then walks one path component, not the whole path).
            return look(self._dir_fd)
        return await anyio.to_thread.run_sync(look, None)

    async def clear_inbox(self, run_id: str, count: int) -> None:
        """Drop the first ``count`` events of the run's inbox (they are in the journal now)."""
        path = inbox_path(self.runs_dir, run_id)
        # Not tried again on a shortage: it may have cleared part of the inbox already.
        async with self.descriptors.short():
            await anyio.to_thread.run_sync(clear_inbox, path, run_id, count, self._ops)

    async def exists(self, run_id: str) -> bool:
        """Whether run ``run_id`` exists.

        Raises:
            JournalIOError: the OS could not say (no permission to look, ``runs`` not a
                directory): never taken for "no such run".
        """
        path = self.location(run_id)

        def look() -> bool:
            try:
                os.stat(path)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise JournalIOError(path, "look for the run", exc) from exc
            return True

        return await anyio.to_thread.run_sync(look)

    async def load_blob(self, ref: BlobRef) -> Any:
        """The decoded content a ``ToolResult`` keeps in the blob store.

        Raises:
            BlobError: the blob is missing or damaged.
        """
        data = await self.descriptors.using("read a blob", lambda: self.blobs.get(ref.digest))
        return msgspec.msgpack.decode(data)

    async def _prepare_event(self, event: Event) -> Event:
        return await prepare_event(
            event,
            redact=self._redact,
            blob_threshold=self.blob_threshold,
            put_blob=self._put_blob,
        )

    def _prepare_now(self, event: Event) -> tuple[Event, bytes | None]:
        return prepare_now(event, redact=self._redact, blob_threshold=self.blob_threshold)

    async def _to_blob(self, event: ToolResult, data: bytes) -> Event:
        return await to_blob(event, data, self._put_blob)

    async def _put_blob(self, data: bytes, summary: str) -> BlobRef:
        # Content-addressed: writing it again after a failure is harmless.
        return await self.descriptors.using(
            "write a blob", lambda: self.blobs.put(data, summary=summary)
        )

    def _wrap(self, run_id: str, file: JournalFile, events: list[AnyEvent]) -> FileJournal:
        watch, name = self._watch, os.path.basename(file.path)
        if watch is not None:
            file.watched = True
            watch.hold(name, file)
        journal = FileJournal(
            run_id=run_id,
            file=file,
            committer=self._committer,
            events=events,
            prepare=self._prepare_now,
            to_blob=self._to_blob,
            screen=self._screen,
            on_close=self._journal_closed,
        )
        self._open.add(journal)
        return journal

    async def _journal_closed(self, journal: FileJournal) -> None:
        # Told the journal rather than holding it in a closure: a closure the journal keeps
        # would make a cycle, and every closed run's events would wait for the cyclic garbage
        # collector instead of going when the last reference does.
        self._open.discard(journal)
        self.descriptors.give_journal()
        if self._watch is not None:
            self._watch.release(os.path.basename(journal.path), journal.file)

    def _check_entered(self) -> None:
        if not self._entry.open:
            raise RuntimeError(
                "the FileStore is closed (enter it again to use it)"
                if self._entry.closed_once
                else "use the FileStore as an async context manager first"
            )


def _summarize(content: Any) -> str:
    text = content if isinstance(content, str) else msgspec.json.encode(content).decode()
    return text[:200]


STALE_TMP_AGE = 60.0


def _remove_stale_tmp(path: str, ops: FileOps) -> None:
    """Remove a creation leftover whose creator is gone: old, and its lock is free.

    A creator takes the lock right after creating the file; the age check keeps this from
    racing that instant in another process.
    """
    try:
        if time.time() - os.path.getmtime(path) < STALE_TMP_AGE:
            return
        fd = ops.open(path, os.O_RDWR)
    except OSError:  # gone already, or not a file this store made: leave it
        return
    try:
        if ops.lock(fd):
            ops.unlink(path)
    finally:
        ops.close(fd)
