"""File operations whose syncs do nothing: what a case costs when the disk costs nothing."""

from __future__ import annotations

from tether.testing import FaultyFileOps


class NoSyncOps(FaultyFileOps):
    """Every ``fdatasync``, ``fsync`` and directory sync replaced by nothing (not durable).

    Through the ``FileOps`` seam, so a ``FileStore`` given it appends on its writer threads
    even where it would otherwise use ``io_uring``.
    """

    def fdatasync(self, fd: int) -> None:
        return None

    def fsync(self, fd: int) -> None:
        return None

    def fsync_dir(self, path: str) -> None:
        return None

    def fsync_dir_fd(self, fd: int, path: str) -> None:
        return None
