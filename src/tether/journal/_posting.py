"""The posters' lock of a directory store: one answer at a time is checked and queued.

While a worker holds a run, an answer is checked against the run's journal and the answers
already queued in its inbox, then queued (``supervisor._answers.record_answer``). Two people
answering one call at that moment (an approval and a rejection, from two consoles or two
``tether approve`` processes) would each check against an inbox without the other's answer
and both be told "queued"; the worker would then record one and drop the other. So the check
and the post happen under this lock: an exclusive ``flock`` on the store's ``runs/`` directory,
which every process, thread and task that queues an answer takes, and the kernel drops if the
process dies.

One lock for the whole store, not one per run: answers come at a person's pace and hold it for
a read of the inbox and the journal and one small fsync'd append, and a lock per run would need
a file per run. It is taken without blocking, tried every ``POLL`` seconds, so that a task
waiting for it never blocks the event loop (another task of the same loop may hold it); after
``PATIENCE`` seconds (a holder stopped, a disk hung) the answer is refused, naming the wait.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import AsyncIterator

import anyio

from .._errors import JournalIOError

POLL = 0.005
PATIENCE = 10.0


@contextlib.asynccontextmanager
async def posting(runs_dir: str) -> AsyncIterator[None]:
    """Hold the posters' lock of the store whose journals are in ``runs_dir``.

    Raises:
        JournalIOError: the directory cannot be opened, or another holder kept the lock for
            ``PATIENCE`` seconds.
    """
    try:
        fd = os.open(runs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise JournalIOError(runs_dir, "take the lock for queueing an answer", exc) from exc
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    stuck = OSError(
                        errno.ETIMEDOUT,
                        f"another answer was still being queued after {PATIENCE:g} s; try again",
                    )
                    raise JournalIOError(
                        runs_dir, "take the lock for queueing an answer", stuck
                    ) from None
                await anyio.sleep(POLL)
        yield
    finally:
        os.close(fd)  # (drops the lock)
