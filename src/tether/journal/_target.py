"""One open journal as the group commit sees it: ``CommitTarget``, shared by both append paths.

A journal's appends are made durable either by a writer thread (``_commit``) or by the event
loop through ``io_uring`` (``_uring``). Both take the groups waiting on a journal, write them as
one batch and sync it, under the same rules; this class holds the state they share, and is the
one place that says who changes which field, and when:

- ``pending``: groups waiting for the next batch. ``GroupCommitter.submit`` appends on the
  event loop; the writer thread serving the journal, or ``Ring.start``, takes them all at once.
- ``scheduled``: the journal is served (queued for a thread, or with a batch in the ring).
  Set by ``submit``; cleared by whoever serves it once nothing is pending. At most one batch of
  a journal is in flight, so writes stay in ``seq`` order.
- ``failed``: the error that poisoned the journal. Set once, by whoever saw the write or sync
  fail, after ``cut_back``; every later batch fails with it without touching the disk.

On the writer threads these fields are read and changed under ``lock``; with the ring,
everything happens on the event loop and the lock is not taken.

What a batch does is said once too: ``check_named``, then ``plan_write``, a write of the planned
bytes and an ``fdatasync``, then ``written`` (or ``cut_back`` and ``failed`` on any error).
``write_batch`` does it with blocking calls of ``ops``; the ring does the same through the
kernel, and asks ``ops`` first (``FileOps.submit_pwrite``, ``submit_fdatasync``).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from ._file import FileOps

if TYPE_CHECKING:  # asyncio itself is imported when an event loop runs, not with tether
    import asyncio

Settle = Callable[[BaseException | None], None]
"""Told a group's outcome on the event loop: ``None`` when durable, else the error."""

Pending: TypeAlias = "tuple[bytes, asyncio.Future[None], Settle]"
"""A framed group waiting to be written, the future its appender awaits, and its ``Settle``."""


class CommitTarget(ABC):
    """The state a journal's appends share between the event loop and its writer (see above).

    Subclasses say where a batch goes (``plan_write``) and what it changes (``written``,
    ``cut_back``); ``JournalFile`` is the one in use.
    """

    def __init__(self, fd: int, ops: FileOps) -> None:
        self.fd = fd
        self.ops = ops
        self.lock = threading.Lock()
        self.pending: list[Pending] = []
        self.scheduled = False
        self.failed: BaseException | None = None

    @abstractmethod
    def plan_write(self, data: bytes) -> tuple[bytes, int, int]:
        """``data`` with any preallocation zeros, its file offset, and the new allocated end."""

    @abstractmethod
    def written(self, end: int, alloc_end: int) -> None:
        """Record that everything up to ``end`` is durable and space up to ``alloc_end``."""

    @abstractmethod
    def cut_back(self) -> None:
        """Cut the file back to the last durable end after a failure (best effort)."""

    @abstractmethod
    def check_named(self) -> None:
        """Raise ``JournalRemovedError`` if the file was removed or replaced while held."""

    def write_batch(self, data: bytes) -> None:
        """Write ``data`` (whole framed groups) and make it durable, with blocking calls; on any
        failure, cut the file back and raise."""
        self.check_named()
        buf, offset, alloc_end = self.plan_write(data)
        try:
            self.ops.write_all(self.fd, buf, offset)
            self.ops.fdatasync(self.fd)
        except BaseException:
            self.cut_back()
            raise
        self.written(offset + len(data), alloc_end)
