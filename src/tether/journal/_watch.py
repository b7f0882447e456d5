"""Noticing that a held journal was removed or replaced, without a system call per append.

A journal removed (or renamed over) while a handle holds it goes on taking the handle's writes,
into a file nobody can open again, while ``create`` may make a new run of the same id in its
place for another process to drive. Checking the name before each batch (an ``fstat`` of the
descriptor and a ``stat`` of the path) catches that, but costs more than its two system calls:
any ``stat`` of the inode being synced slows the sync on the machine the benchmarks run on (a
bare loop of ``pwrite`` + ``fdatasync``: 9,058/s, with one ``fstat`` before each: 6,525/s;
through ``FileJournal.append``, 15-30% fewer appends of one journal, on the threads and the ring).

So a store watches its ``runs/`` directory through Linux inotify for names that are removed
(``IN_DELETE``), renamed away (``IN_MOVED_FROM``) or renamed onto (``IN_MOVED_TO``). The event
loop reads the events; a held journal whose name appears is marked ``suspect``, and its next
batch checks the name (``JournalFile.check_named``) before anything is written, failing with
``JournalRemovedError`` if the path names another file or none. An append costs a flag test.
The kernel queues an event before the ``unlink`` or ``rename`` returns; the loop reads it at its
next poll. A batch handed to the disk before that poll can still go to the removed file (the
next one fails).

The same watch tells when a run's inbox may have changed (``inbox_mark``): a name ending in
``.inbox`` created (``IN_CREATE``), closed after a write (``IN_CLOSE_WRITE``: a post closes the
inbox once its record is written and synced, even when a crash ends the poster), renamed onto,
away or removed (a ``clear``). A supervisor asks before each model or tool call whether a
cancellation waits for the run it advances; with the watch, a run whose inbox's mark has not
moved since it last looked costs no system call at all, where an ``lstat`` of each run's inbox
before each call cost a third of the step's CPU at 1,000 runs on a memory filesystem (tmpfs
keeps no record of a name it did not find, and journals are created and closed in the same
directory meanwhile). ``inbox_changed`` returns when an inbox changed, so that a call in
flight is halted at once rather than at the next poll. Journals' writes raise no event:
``IN_MODIFY`` is not watched.

Where inotify cannot be had (not Linux, or the per-user limit of instances is reached), every
batch checks the name, at the cost above, and every call looks at the inbox.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import sys
from typing import TYPE_CHECKING, Protocol, final

if TYPE_CHECKING:
    import asyncio

_IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE = 0x08, 0x40, 0x80, 0x100
_IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF = 0x200, 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_ONLYDIR = 0x4000, 0x8000, 0x01000000
_NAMES = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE
"""Events after which a held journal of that name may have lost it."""
_WATCHED = _NAMES | _IN_CREATE | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
_INBOX = ".inbox"
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVERYTHING = _GONE | _IN_Q_OVERFLOW
"""Events after which any held journal may have lost its name (the directory itself went, or
the kernel dropped events)."""
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then ``len`` bytes of name
_MARKS = itertools.count(1)
"""Inbox marks, increasing across every watch of the process: a new watch's first mark is past
any mark an older one gave."""
MAX_MARKED = 4096
"""Runs whose inbox changed that a watch remembers by name; past that it forgets them all, and
every run's mark moves (each looks once more)."""


class Watched(Protocol):
    """A held journal, as the watch sees it."""

    suspect: bool


@final
class RunsWatch:
    """Marks the held journals of one directory ``suspect`` when their names are removed or
    replaced, and moves the mark of a run whose inbox changed. Made by ``open_watch``, bound
    to the running event loop; ``close`` it."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio  # when a store opens, not when tether is imported

        self._event = asyncio.Event
        self._fd = fd
        self._loop = loop
        self._held: dict[str, set[Watched]] = {}
        self._inboxes: dict[str, int] = {}  # run id -> the mark its inbox's last change set
        self._floor = next(_MARKS)  # every run's mark is at least this
        self._broken = False  # the watch failed: no mark holds still any more
        self.news = 0
        """How many times inbox news came (``inbox_changed``'s ``since``)."""
        self._news = self._event()
        loop.add_reader(fd, self._read)

    def inbox_mark(self, run_id: str) -> int:
        """A number that moves whenever run ``run_id``'s inbox may have changed since this
        watch began (and at its beginning): a caller that looked at the inbox when the mark
        was ``m`` need not look again while it is still ``m``. Take the mark before the look:
        a change during the look moves it."""
        if self._broken:
            return next(_MARKS)
        return max(self._floor, self._inboxes.get(run_id, 0))

    async def inbox_changed(self, since: int | None = None) -> None:
        """Return when an inbox of the directory changed (or events were lost): at once if
        news came since ``news`` was ``since``, so that none that came while the caller was
        busy is missed."""
        if since is not None and since != self.news:
            return
        await self._news.wait()

    def _inbox_news(self, run_id: str | None) -> None:
        """Move the mark of ``run_id``'s inbox (``None``: of every inbox) and wake the waiters."""
        mark = next(_MARKS)
        if run_id is None or len(self._inboxes) >= MAX_MARKED:
            self._inboxes.clear()
            self._floor = mark
        else:
            self._inboxes[run_id] = mark
        self.news += 1
        news, self._news = self._news, self._event()
        news.set()

    def hold(self, name: str, journal: Watched) -> None:
        """Watch ``journal``, held under the file name ``name`` in the directory."""
        self._held.setdefault(name, set()).add(journal)

    def release(self, name: str, journal: Watched) -> None:
        held = self._held.get(name)
        if held is not None:
            held.discard(journal)
            if not held:
                del self._held[name]

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:  # the watch itself failed: from now on, suspect everything
                self._broken = True
                self._mark_all()
                self._inbox_news(None)
                return
            if not data:
                return
            self._handle(data)

    def _handle(self, data: bytes) -> None:
        pos = 0
        while pos + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            raw = data[pos + _EVENT.size : pos + _EVENT.size + length]
            pos += _EVENT.size + length
            if mask & _EVERYTHING:
                if mask & _GONE:  # the directory itself went: nothing is watched any more
                    self._broken = True
                self._mark_all()
                self._inbox_news(None)
                continue
            name = os.fsdecode(raw.rstrip(b"\x00"))
            if name.endswith(_INBOX):
                self._inbox_news(name[: -len(_INBOX)])
            elif mask & _NAMES:
                for journal in self._held.get(name, ()):
                    journal.suspect = True

    def _mark_all(self) -> None:
        for held in self._held.values():
            for journal in held:
                journal.suspect = True

    def close(self) -> None:
        """Stop watching and release the inotify descriptor (waking whoever waits for news of
        an inbox: it must look for itself now). Idempotent."""
        if self._fd < 0:
            return
        self._inbox_news(None)
        with contextlib.suppress(ValueError, RuntimeError):  # the loop may be closed already
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


def open_watch(directory: str) -> RunsWatch | None:
    """A watch of ``directory`` bound to the running loop, or ``None`` where inotify is not
    available (then every batch checks its journal's name, every call looks at the inbox)."""
    if sys.platform != "linux":
        return None
    import asyncio  # asyncio and ctypes when a store opens, not when tether is imported
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(directory), _WATCHED | _IN_ONLYDIR) < 0:
        os.close(fd)
        return None
    return RunsWatch(fd, asyncio.get_running_loop())
