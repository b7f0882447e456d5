"""The file layer: every system call the journal makes goes through ``FileOps``.

This is the fault seam. Tests (and ``tether.testing.FaultyFileOps``) subclass it to return short
writes, raise ``ENOSPC`` or ``EIO`` on a chosen call, without patching ``os`` for the whole
process. The primitives are blocking and run on writer threads, never on the event loop.

Appends through ``io_uring`` (``_uring``) make no ``pwrite`` or ``fdatasync`` call: the kernel
does the writing and syncing. Before it queues each write and each sync, the ring asks this
layer (``submit_pwrite``, ``submit_fdatasync``, called on the event loop), which may shorten
the write or refuse either with an ``OSError``; the refusal then comes back to the ring as the
kernel's result for that request, so the same faults reach both paths. A subclass that
changes ``pwrite`` or ``fdatasync`` without changing the matching ``submit_`` hook in the same
class cannot be followed by the ring, so a store given it keeps its appends on the writer
threads (``reaches_ring``).

A file that already exists is opened without blocking (``O_NONBLOCK``) and must then be a
regular file: a FIFO named like a journal would otherwise block its opener for ever (a sweep,
``tether runs``, a worker that no longer answers SIGTERM), and one swapped in after a listing
is caught as well, since the check is made on what was opened. ``O_NONBLOCK`` is cleared
again at once: ``io_uring`` fails a write to a non-blocking file with ``EAGAIN`` rather than
waiting for it.

Everything a store creates is its owner's alone, whatever the process's umask: files
``FILE_MODE`` (0600) and directories ``DIR_MODE`` (0700). Journals, blobs and inboxes hold
customer data. The umask can only take bits away from the mode asked for (one of 0277 leaves
the owner unable to write), and a file that already existed keeps its mode, so the mode is set
again explicitly on every file opened for creation and every directory made.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys

FILE_MODE = 0o600
DIR_MODE = 0o700
_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)
_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_SETFL = os.O_APPEND | getattr(os, "O_DIRECT", 0) | getattr(os, "O_NOATIME", 0)
"""The status flags ``F_SETFL`` changes, but ``O_NONBLOCK``: what an open asked for is kept."""


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a regular file``, ``a FIFO``...)."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "a device"


def not_regular(path: str, mode: int) -> OSError:
    """The error for opening ``path`` (of ``st_mode`` ``mode``) as if it were a file."""
    code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
    return OSError(code, f"is {kind_of(mode)}, not a regular file", path)


class FileOps:
    """Blocking file operations on raw descriptors; subclass to inject faults."""

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        """Open ``path``: a file that may exist already without blocking, and only if it is a
        regular file, never through a symbolic link (a link planted where a journal, an inbox
        or a copy goes would have a store truncate, write or chmod whatever it points at); a
        file opened for creation (``O_CREAT``, ``O_TMPFILE``) gets exactly ``mode``. A
        directory is opened as asked (``O_DIRECTORY``).

        Raises:
            OSError: as ``os.open``, or ``EINVAL``/``EISDIR``/``ELOOP`` if ``path`` is not a
                regular file (``ELOOP``: a symbolic link).
        """
        flags |= getattr(os, "O_CLOEXEC", 0)
        tmpfile = bool(_O_TMPFILE) and flags & _O_TMPFILE == _O_TMPFILE
        if flags & _O_DIRECTORY and not tmpfile:
            return os.open(path, flags, mode)
        new = tmpfile or (flags & os.O_CREAT and flags & os.O_EXCL)  # a new file, surely regular
        if not tmpfile:
            flags |= _O_NOFOLLOW
        try:
            fd = os.open(path, flags if new else flags | os.O_NONBLOCK, mode)
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(path):
                raise OSError(errno.ELOOP, "is a symbolic link, not a regular file", path) from None
            raise
        try:
            if not new:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise not_regular(path, st.st_mode)
                if not flags & os.O_NONBLOCK:
                    fcntl.fcntl(fd, fcntl.F_SETFL, flags & _SETFL)
            if flags & os.O_CREAT or tmpfile:
                os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def mkdir(self, path: str, mode: int = DIR_MODE) -> None:
        """Make the directory ``path`` with exactly ``mode``."""
        os.mkdir(path, mode)
        os.chmod(path, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def fdatasync(self, fd: int) -> None:
        if sys.platform == "darwin":  # pragma: no cover - macOS only
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        else:
            os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        if sys.platform == "darwin":  # pragma: no cover - macOS only
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        else:
            os.fsync(fd)

    def submit_pwrite(self, fd: int, size: int, offset: int) -> int:
        """The ring is about to ask the kernel to write ``size`` bytes at ``offset`` to ``fd``:
        how many of them to ask for (fewer makes a short write, which the ring finishes).

        Raises:
            OSError: the error the kernel's write then reports (nothing is written).
        """
        return size

    def submit_fdatasync(self, fd: int) -> None:
        """The ring is about to ask the kernel to ``fdatasync`` ``fd`` (after a whole write).

        Raises:
            OSError: the error the kernel's sync then reports (the write still runs).
        """

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def lock(self, fd: int) -> bool:
        """Take an exclusive, non-blocking ``flock``; ``False`` if another holder has it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def wait_lock(self, fd: int, *, shared: bool = False) -> None:
        """Take a ``flock`` (exclusive, or ``shared``), waiting for other holders to let go."""
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)

    def fsync_dir(self, path: str) -> None:
        """Make the directory entries in ``path`` durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir_fd(self, fd: int, path: str) -> None:
        """Make the directory entries of ``path``, open as ``fd``, durable."""
        os.fsync(fd)

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def link_fd(self, fd: int, dir_fd: int, name: str) -> None:
        """Give the unnamed file open as ``fd`` (``O_TMPFILE``) the name ``name`` in the
        directory open as ``dir_fd``; ``FileExistsError`` if the name is taken."""
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    # Compound operations, built from the primitives above so that faults reach them too.

    def write_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Write every byte of ``data`` at ``offset``, looping over short writes."""
        view = memoryview(data)
        while view:
            n = self.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.EIO, "write made no progress")
            view = view[n:]
            offset += n

    def make_dirs(self, path: str) -> None:
        """Make ``path`` and any missing parent (each ``DIR_MODE``), each entry made durable in
        its parent directory."""
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        if parent and parent != path:
            self.make_dirs(parent)
        try:
            self.mkdir(path)
        except FileExistsError:  # made by another process meanwhile
            if not os.path.isdir(path):
                raise
            return
        self.fsync_dir(parent or ".")

    def same_file(self, fd: int, path: str) -> bool:
        """Whether ``path`` still names the file open as ``fd`` (not removed, nor replaced)."""
        held = self.fstat(fd)
        try:
            named = self.stat(path)
        except FileNotFoundError:
            return False
        return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)

    def read_all(self, fd: int) -> bytes:
        """The whole file, read from offset 0."""
        size = self.size(fd)
        chunks: list[bytes] = []
        offset = 0
        while offset < size:
            chunk = self.pread(fd, min(size - offset, 1 << 24), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)


def reaches_ring(ops: FileOps) -> bool:
    """Whether every write and sync the ring would make for ``ops`` reaches ``ops`` too.

    So for ``FileOps`` itself and ``FaultyFileOps``; not for a subclass whose nearest
    ``pwrite`` (or ``fdatasync``) comes from a class that does not also define
    ``submit_pwrite`` (or ``submit_fdatasync``), such as one that replaces syncs by nothing.
    """
    for primitive in ("pwrite", "fdatasync"):
        owner = next(c for c in type(ops).__mro__ if primitive in vars(c))
        if owner is not FileOps and f"submit_{primitive}" not in vars(owner):
            return False
    return True


DEFAULT_FILE_OPS = FileOps()
