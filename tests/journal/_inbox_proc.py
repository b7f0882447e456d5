"""A child process that dies with SIGKILL inside an inbox operation, for the inbox crash tests.

``python -m tests.journal._inbox_proc MODE ROOT RUN_ID [N]``:

``post``
    Post one answer (a ``Decision`` whose ``by`` is ``killed``) to run ``RUN_ID``'s inbox, and
    die in the middle of writing it: the first write to the inbox puts half of its bytes on
    disk, then the process kills itself.
``clear``
    Clear the first ``N`` answers of the inbox, dying at its ``KILL_AT``-th file operation
    (the environment variable): before a call to anything but ``pwrite``, or halfway through a
    ``pwrite``. Prints ``finished`` if the clear ends before that.

The kill comes from inside the file layer (a ``FileOps`` subclass), so it lands exactly where a
test wants it, and it is a real ``SIGKILL``: nothing after it runs, no ``finally``, no flush.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from tether.journal import Decision, FileStore
from tether.journal._file import FILE_MODE
from tether.journal.lowlevel import FileOps


class KillingFileOps(FileOps):
    """Kills the process at its ``kill_at``-th operation once ``armed`` (counting from 1);
    with ``only_inbox``, at the first write to an inbox."""

    def __init__(self, kill_at: int = 0, *, only_inbox: bool = False) -> None:
        self.kill_at = kill_at
        self.only_inbox = only_inbox
        self.armed = False
        self.calls = 0
        self._inboxes: set[int] = set()

    def _step(self) -> bool:
        """Count one operation; whether it is the one to die in."""
        if not self.armed or self.only_inbox:
            return False
        self.calls += 1
        return self.calls == self.kill_at

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        if self._step():
            _die()
        fd = super().open(path, flags, mode)
        if path.endswith(".inbox"):
            self._inboxes.add(fd)
        return fd

    def pwrite(self, fd: int, data: memoryview, offset: int) -> int:
        inbox_write = self.only_inbox and self.armed and fd in self._inboxes
        if self._step() or inbox_write:
            half = max(1, len(data) // 2)
            super().pwrite(fd, data[:half], offset)
            _die()
        return super().pwrite(fd, data, offset)

    def _guarded(self) -> None:
        if self._step():
            _die()

    def fsync(self, fd: int) -> None:
        self._guarded()
        super().fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        self._guarded()
        super().ftruncate(fd, length)

    def fsync_dir(self, path: str) -> None:
        self._guarded()
        super().fsync_dir(path)

    def replace(self, src: str, dst: str) -> None:
        self._guarded()
        super().replace(src, dst)

    def unlink(self, path: str) -> None:
        self._guarded()
        super().unlink(path)

    def close(self, fd: int) -> None:
        self._guarded()
        self._inboxes.discard(fd)
        super().close(fd)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(mode: str, root: str, run_id: str, count: int) -> None:
    if mode == "post":
        ops = KillingFileOps(only_inbox=True)
    else:
        ops = KillingFileOps(int(os.environ["KILL_AT"]))
    async with FileStore(root, file_ops=ops) as store:
        ops.armed = True
        if mode == "post":
            await store.post(run_id, Decision(call_id="toolu_x", approved=True, by="killed"))
        else:
            await store.clear_inbox(run_id, count)
        ops.armed = False
    print("finished", flush=True)


if __name__ == "__main__":
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], n)
