"""Advertisements in a directory store: ``workers/<digest>.worker``, one file per live worker.

A file holds its key (one line) and the advertisement's bytes. Its writer keeps it open with an
exclusive ``flock`` for as long as it advertises: the kernel drops that lock when the process
dies, so a reader that can take a shared lock on a file knows its writer is gone, and removes
it. A file is written under a temporary name, locked, then renamed into place, so a reader never
sees a file whose writer has not locked it yet. The descriptor each writer keeps is one of the
process's own, outside the store's journal budget (the budget's reserve covers it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os

from ._file import FileOps

SUFFIX = ".worker"


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX


def publish(folder: str, key: str, data: bytes, ops: FileOps) -> int:
    """Write the advertisement ``data`` of ``key`` into ``folder``; return the descriptor that
    keeps it alive (close it with ``withdraw``)."""
    ops.make_dirs(folder)
    final = os.path.join(folder, _name(key))
    tmp = f"{final}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        ops.unlink(tmp)
    fd = ops.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        ops.write_all(fd, key.encode() + b"\n" + data, 0)
        ops.replace(tmp, final)
    except BaseException:
        ops.close(fd)
        with contextlib.suppress(OSError):
            ops.unlink(tmp)
        raise
    return fd


def withdraw(folder: str, key: str, fd: int, ops: FileOps) -> None:
    """Remove ``key``'s advertisement and let its lock go."""
    try:
        with contextlib.suppress(FileNotFoundError):
            ops.unlink(os.path.join(folder, _name(key)))
    finally:
        ops.close(fd)


def read_all(folder: str, own: dict[str, int], ops: FileOps) -> dict[str, bytes]:
    """Every live advertisement in ``folder`` by key (this process's ``own``, by their
    descriptors, included); the files of writers that are gone are removed."""
    found: dict[str, bytes] = {}
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(SUFFIX)]
    except FileNotFoundError:
        return found
    mine = {_name(key) for key in own}
    for name in names:
        path = os.path.join(folder, name)
        try:
            fd = ops.open(path, os.O_RDONLY)
        except OSError:
            continue  # removed meanwhile, or not a regular file: nobody's advertisement
        try:
            if name not in mine:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                else:  # nobody holds it: its writer is gone
                    with contextlib.suppress(OSError):
                        ops.unlink(path)
                    continue
            key, _, data = ops.read_all(fd).partition(b"\n")
            found[key.decode(errors="replace")] = data
        finally:
            ops.close(fd)
    return found
