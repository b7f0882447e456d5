"""A fault-injecting file layer: make chosen system calls of a store fail, on purpose.

``FaultyFileOps`` is a ``FileOps`` whose primitive operations can be armed to raise ``OSError``
with a chosen ``errno``, to write fewer bytes than asked (a legitimate short write), or to fill
up like a full disk. Pass it as ``FileStore(root, file_ops=faults)``; nothing else in the process
is affected, and ``os`` is never patched.

Every call of every primitive is counted in ``calls``, faulted or not, so a test can assert that
a poisoned journal never touches the disk again. Calls arrive from writer threads; every method
is thread-safe.

Both append paths meet the same faults. A store appending through ``io_uring`` asks
``submit_pwrite`` and ``submit_fdatasync`` (on the event loop) before it queues each write and
sync for the kernel; here they make the checks ``pwrite`` and ``fdatasync`` make, so the ring's
writes and syncs are counted as ``pwrite`` and ``fdatasync``, cut short, or failed with the
armed ``errno`` as the threads' calls are.
"""

from __future__ import annotations

import errno as errno_codes
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from ..journal._layout import DIR_MODE, FILE_MODE
from ..journal.lowlevel import FileOps


@dataclass
class _Fault:
    code: int
    skip: int
    remaining: int | None  # ``None``: forever


class FaultyFileOps(FileOps):
    """``FileOps`` with faults a test arms and disarms at run time.

    Example::

        faults = FaultyFileOps()
        async with FileStore(root, file_ops=faults) as store:
            journal = await store.create("run-1")
            faults.fail("fdatasync", errno.EIO)  # the next fdatasync raises EIO
            with pytest.raises(JournalBrokenError):
                await journal.append([...])
            assert faults.calls["fdatasync"] == 1

    Faults apply to the primitive operations named in ``OPS``. The compound ``write_all`` and
    ``read_all`` are built from ``pwrite`` and ``pread``, so they meet the same faults, and the
    writes and syncs of the ``io_uring`` path are counted and faulted as ``pwrite`` and
    ``fdatasync``. Subclass it to add behaviour of your own (pausing a call, say); call
    ``super()`` to keep the counting and the faults. A subclass that overrides ``pwrite`` or
    ``fdatasync`` (and not the matching ``submit_`` hook) keeps a store's appends on the
    writer threads, where its override is called.
    """

    OPS: ClassVar[frozenset[str]] = frozenset(
        {
            "open",
            "mkdir",
            "close",
            "pwrite",
            "pread",
            "size",
            "stat",
            "fdatasync",
            "fsync",
            "ftruncate",
            "lock",
            "wait_lock",
            "fsync_dir",
            "link",
            "unlink",
            "replace",
        }
    )
    """Names of the operations that are counted and can be made to fail."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._faults: dict[str, list[_Fault]] = {}
        self._max_write: int | None = None
        self._space: int | None = None
        self._space_errno = errno_codes.ENOSPC

    @property
    def calls(self) -> Counter[str]:
        """How many times each operation was called (a snapshot; missing names count 0)."""
        with self._lock:
            return Counter(self._calls)

    def fail(
        self, op: str, code: int = errno_codes.EIO, *, after: int = 0, times: int | None = 1
    ) -> None:
        """Make calls of ``op`` raise ``OSError(code)``.

        Args:
            op: an operation name from ``OPS``, such as ``"fdatasync"`` or ``"pwrite"``.
            code: the ``errno`` of the raised error (``FileExistsError`` and the other
                ``OSError`` subclasses follow from it, as they do for real calls).
            after: how many calls of ``op``, counted from now, succeed first: the
                ``after + 1``-th call is the first to fail.
            times: how many consecutive calls fail from then on; ``None`` for every call.

        Raises:
            ValueError: an unknown ``op``, a negative ``after`` or a ``times`` below 1.
        """
        if op not in self.OPS:
            raise ValueError(f"unknown operation {op!r}; choose from {sorted(self.OPS)}")
        if after < 0:
            raise ValueError("after must be at least 0")
        if times is not None and times < 1:
            raise ValueError("times must be at least 1, or None for every call")
        with self._lock:
            self._faults.setdefault(op, []).append(_Fault(code, after, times))

    def short_writes(self, max_bytes: int | None) -> None:
        """Let each ``pwrite`` write at most ``max_bytes`` bytes; ``None`` lifts the limit.

        A short write is not an error: the caller has to loop until every byte is written.

        Raises:
            ValueError: ``max_bytes`` is below 1.
        """
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1, or None")
        with self._lock:
            self._max_write = max_bytes

    def fail_write_after_bytes(self, nbytes: int, code: int = errno_codes.ENOSPC) -> None:
        """Let ``pwrite`` write ``nbytes`` more bytes in total, then raise ``OSError(code)``.

        Like a disk filling up: the write that crosses the limit is cut short (its first bytes
        reach the file), and every later ``pwrite`` raises, until ``reset``.

        Raises:
            ValueError: ``nbytes`` is negative.
        """
        if nbytes < 0:
            raise ValueError("nbytes must be at least 0")
        with self._lock:
            self._space = nbytes
            self._space_errno = code

    def reset(self) -> None:
        """Disarm every fault and limit, and zero the call counters."""
        with self._lock:
            self._calls.clear()
            self._faults.clear()
            self._max_write = None
            self._space = None
            self._space_errno = errno_codes.ENOSPC

    def _enter(self, op: str, filename: str | None = None) -> None:
        """Count one call of ``op`` and raise if a fault fires for it."""
        with self._lock:
            self._calls[op] += 1
            faults = self._faults.get(op)
            if not faults:
                return
            fire: _Fault | None = None
            for fault in faults:
                if fault.skip:
                    fault.skip -= 1
                elif fire is None:
                    fire = fault
            if fire is None:
                return
            if fire.remaining is not None:
                fire.remaining -= 1
                if fire.remaining == 0:
                    faults.remove(fire)
        message = f"{os.strerror(fire.code)} (injected in {op})"
        if filename is None:
            raise OSError(fire.code, message)
        raise OSError(fire.code, message, filename)

    def _limit_write(self, size: int) -> int:
        """How many of ``size`` bytes the next ``pwrite`` may write; raise when the disk is full."""
        with self._lock:
            n = size if self._max_write is None else min(size, self._max_write)
            if self._space is None:
                return n
            if self._space == 0 and n > 0:
                code = self._space_errno
            else:
                n = min(n, self._space)
                self._space -= n
                return n
        raise OSError(code, f"{os.strerror(code)} (injected in pwrite)")

    # The primitives: count, maybe fail, then do the real thing.

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        self._enter("open", path)
        return super().open(path, flags, mode)

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        self._enter("mkdir", path)
        super().mkdir(path, mode)

    def close(self, fd: int) -> None:
        self._enter("close")
        super().close(fd)

    def pwrite(self, fd: int, data: memoryview, offset: int) -> int:
        self._enter("pwrite")
        n = self._limit_write(len(data))
        return super().pwrite(fd, data[:n], offset)

    def submit_pwrite(self, fd: int, size: int, offset: int) -> int:
        self._enter("pwrite")  # the ring's write: counted, cut short or failed as ``pwrite``
        return self._limit_write(size)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._enter("pread")
        return super().pread(fd, size, offset)

    def size(self, fd: int) -> int:
        self._enter("size")
        return super().size(fd)

    def fstat(self, fd: int) -> os.stat_result:
        self._enter("stat")
        return super().fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        self._enter("stat", path)
        return super().stat(path)

    def fdatasync(self, fd: int) -> None:
        self._enter("fdatasync")
        super().fdatasync(fd)

    def submit_fdatasync(self, fd: int) -> None:
        self._enter("fdatasync")  # the ring's sync: counted and failed as ``fdatasync``

    def fsync(self, fd: int) -> None:
        self._enter("fsync")
        super().fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        self._enter("ftruncate")
        super().ftruncate(fd, length)

    def lock(self, fd: int) -> bool:
        self._enter("lock")
        return super().lock(fd)

    def wait_lock(self, fd: int, *, shared: bool = False) -> None:
        self._enter("wait_lock")
        super().wait_lock(fd, shared=shared)

    def fsync_dir(self, path: str) -> None:
        self._enter("fsync_dir", path)
        super().fsync_dir(path)

    def fsync_dir_fd(self, fd: int, path: str) -> None:
        self._enter("fsync_dir", path)
        super().fsync_dir_fd(fd, path)

    def link(self, src: str, dst: str) -> None:
        self._enter("link", dst)
        super().link(src, dst)

    def link_fd(self, fd: int, dir_fd: int, name: str) -> None:
        self._enter("link", name)
        super().link_fd(fd, dir_fd, name)

    def unlink(self, path: str) -> None:
        self._enter("unlink", path)
        super().unlink(path)

    def replace(self, src: str, dst: str) -> None:
        self._enter("replace", dst)
        super().replace(src, dst)
