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

Where inotify cannot be had (not Linux, or the per-user limit of instances is reached), every
batch checks the name, at the cost above.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from typing import TYPE_CHECKING, Protocol, final

if TYPE_CHECKING:
    import asyncio

_IN_MOVED_FROM, _IN_MOVED_TO, _IN_DELETE = 0x40, 0x80, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_IN_ONLYDIR = 0x01000000
_NAMES = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE
_EVERYTHING = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_Q_OVERFLOW | _IN_IGNORED
"""Events after which any held journal may have lost its name (the directory itself went, or
the kernel dropped events)."""
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then ``len`` bytes of name


class Watched(Protocol):
    """A held journal, as the watch sees it."""

    suspect: bool


@final
class RemovalWatch:
    """Marks the held journals of one directory ``suspect`` when their names are removed or
    replaced. Made by ``open_watch``, bound to the running event loop; ``close`` it."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        self._loop = loop
        self._held: dict[str, set[Watched]] = {}
        loop.add_reader(fd, self._read)

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
                self._mark_all()
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
                self._mark_all()
                continue
            for journal in self._held.get(os.fsdecode(raw.rstrip(b"\x00")), ()):
                journal.suspect = True

    def _mark_all(self) -> None:
        for held in self._held.values():
            for journal in held:
                journal.suspect = True

    def close(self) -> None:
        """Stop watching and release the inotify descriptor. Idempotent."""
        if self._fd < 0:
            return
        with contextlib.suppress(ValueError, RuntimeError):  # the loop may be closed already
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


def open_watch(directory: str) -> RemovalWatch | None:
    """A watch of ``directory`` bound to the running loop, or ``None`` where inotify is not
    available (then every batch checks its journal's name)."""
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
    if libc.inotify_add_watch(fd, os.fsencode(directory), _NAMES | _IN_ONLYDIR) < 0:
        os.close(fd)
        return None
    return RemovalWatch(fd, asyncio.get_running_loop())
