"""Group commit: long-lived writer threads that make appends durable off the event loop.

Why not ``anyio.to_thread.run_sync`` per append: every hop starts or wakes a pool thread and
then wakes the event loop, and on small virtual machines each wake-up costs 100-200 µs, more
than the ``fdatasync`` itself. Here a fixed set of threads serves a queue of journals that have
pending groups. A thread takes *every* group pending on one journal (framed on the event loop
already, so the thread holds the GIL as little as possible), writes them with one ``pwrite``
and one ``fdatasync``, and reports all the acknowledgements of all threads through a single
event-loop wake-up, which it sends as its last act before blocking again. Each group's outcome
goes straight to its journal's callback in that wake-up, and only then to the future an
appender awaits. Appends that arrive while a journal is syncing ride on its next sync.

The same threads run the blocking calls that open, create and close journals (``run``), whose
results ride the same batched wake-ups.

Per journal, at most one thread works at a time (the ``scheduled`` flag; ``_target`` says who
changes which field of a journal, on both paths), so writes to one file are never concurrent
and stay in ``seq`` order. Different journals sync in parallel, which lets
the filesystem merge their flushes.

A failed write or sync first cuts the file back to its last acknowledged end (``cut_back``),
then is remembered on the journal (``failed``), and every later group of that journal fails
with the same error without touching the disk: fsync is never retried.

Where ``io_uring`` is available and wanted, appends bypass the threads: the event loop hands
each journal's pending groups to the ring (``_uring``) under the same rules, and the threads
only open, create and close journals.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, final

import anyio

from ._target import CommitTarget, Pending, Settle
from ._uring import Ring, open_ring

if TYPE_CHECKING:
    import asyncio

_Completion: TypeAlias = "tuple[asyncio.Future[Any], Settle | None, BaseException | None, Any]"
_T = TypeVar("_T")


@final
class _Job:
    """A blocking call (opening, creating or closing a journal) for a writer thread."""

    __slots__ = ("fn", "fut")

    def __init__(self, fn: Callable[[], Any], fut: asyncio.Future[Any]) -> None:
        self.fn = fn
        self.fut = fut


@final
class GroupCommitter:
    """A pool of writer threads shared by the journals of one store.

    Use as an async context manager; on exit every thread is stopped and joined.

    Args:
        threads: how many journals may sync at the same time.
    """

    def __init__(self, *, threads: int = 16, io_uring: bool = False) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self._nthreads = threads
        self._want_ring = io_uring
        self._ring: Ring | None = None
        self._ready: queue.SimpleQueue[CommitTarget | _Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done_lock = threading.Lock()
        self._done: list[_Completion] = []
        self._wake_pending = False
        self._closed = False
        self._syncs = 0

    async def __aenter__(self) -> GroupCommitter:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def start(self) -> None:
        """Start the threads, bound to the running event loop."""
        if self._loop is not None:
            return
        import asyncio  # here, not with tether: a program that never runs a loop never needs it

        self._loop = asyncio.get_running_loop()
        if self._want_ring:
            self._ring = open_ring(self._deliver, workers=self._nthreads)
        for i in range(self._nthreads):
            t = threading.Thread(target=self._work, name=f"tether-journal-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    async def aclose(self) -> None:
        """Stop and join every thread after the work already queued. Idempotent.

        On cancellation: the join is shielded, so the threads are gone when this returns.
        """
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._ready.put(None)
        threads, self._threads = self._threads, []
        with anyio.CancelScope(shield=True):
            if self._ring is not None:
                await self._ring.aclose()
            await anyio.to_thread.run_sync(_join_all, threads)

    @property
    def syncs(self) -> int:
        """How many batches have been written and synced (by threads and ring together)."""
        return self._syncs + (self._ring.syncs if self._ring is not None else 0)

    @property
    def uses_io_uring(self) -> bool:
        """Whether appends go through ``io_uring`` (else through the writer threads)."""
        return self._ring is not None

    def submit(self, target: CommitTarget, group: bytes, settle: Settle) -> asyncio.Future[None]:
        """Queue one framed group for ``target``.

        When the group is durable or failed, ``settle`` is called with the outcome on the event
        loop, whatever became of the returned future (which a cancelled appender cancels); then
        the future completes the same way.
        """
        if self._loop is None or self._closed:
            raise RuntimeError("the group committer is not running")
        fut: asyncio.Future[None] = self._loop.create_future()
        if self._ring is not None:  # everything happens on the loop: no lock needed
            target.pending.append((group, fut, settle))
            if not target.scheduled:
                target.scheduled = True
                self._ring.start(target)
            return fut
        with target.lock:
            target.pending.append((group, fut, settle))
            if target.scheduled:
                return fut
            target.scheduled = True
        self._ready.put(target)
        return fut

    async def run(self, fn: Callable[[], _T]) -> _T:
        """Run blocking ``fn`` on a writer thread and return its result (or raise its error).

        Cheaper than a hop through ``anyio.to_thread``: the result rides the same batched
        loop wake-up as the acknowledgements of appends.

        On cancellation: ``fn`` is not interrupted; the call waits for it to finish (its
        resources may need closing), then the cancellation takes effect.
        """
        if self._loop is None or self._closed:
            raise RuntimeError("the group committer is not running")
        fut: asyncio.Future[_T] = self._loop.create_future()
        self._ready.put(_Job(fn, fut))
        with anyio.CancelScope(shield=True):
            result = await fut
        return result  # noqa: RET504 - outside the scope, or mypy sees a missing return

    def _work(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            if isinstance(item, _Job):
                try:
                    result, error = item.fn(), None
                except BaseException as exc:
                    result, error = None, exc
                self._complete([(item.fut, None, error, result)])
            else:
                self._serve(item)

    def _serve(self, target: CommitTarget) -> None:
        """Write ``target``'s pending groups until it has none, or until another journal waits.

        Acknowledgements go out before the next write starts. Groups that arrived during a write
        are written at once by this thread while no other journal is queued (no hand-off to
        another thread); otherwise the journal goes to the back of the queue, so one busy journal
        cannot hold a thread while others wait. Once closing, a journal is finished here rather
        than queued behind the stop markers.
        """
        while True:
            with target.lock:
                batch, target.pending = target.pending, []
            error = target.failed
            if error is None:
                try:
                    target.write_batch(
                        batch[0][0] if len(batch) == 1 else b"".join(g for g, _, _ in batch)
                    )
                except BaseException as exc:  # every failure poisons the journal
                    target.failed = error = exc
            done: list[_Completion] = [(fut, settle, error, None) for _, fut, settle in batch]
            synced = error is None
            with target.lock:
                idle = not target.pending
                if idle:
                    target.scheduled = False
            if idle:
                # Waking the loop is the last thing before this thread blocks again, so the loop
                # does not wake only to wait for the GIL.
                self._complete(done, synced)
                return
            if not self._ready.empty() and not self._closed:
                self._ready.put(target)
                self._complete(done, synced)
                return
            self._complete(done, synced)

    def _complete(self, items: list[_Completion], synced: bool = False) -> None:
        with self._done_lock:
            self._syncs += synced
            self._done.extend(items)
            if self._wake_pending:
                return
            self._wake_pending = True
        loop = self._loop
        assert loop is not None
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(self._drain)

    def _deliver(self, target: object, batch: list[Pending], error: BaseException | None) -> None:
        """Tell the outcome of a ring's batch, as ``_drain`` does for the threads'."""
        for _, fut, settle in batch:
            _resolve(fut, settle, error, None)

    def _drain(self) -> None:
        with self._done_lock:
            items, self._done = self._done, []
            self._wake_pending = False
        for fut, settle, error, result in items:
            _resolve(fut, settle, error, result)


def _resolve(
    fut: asyncio.Future[Any], settle: Settle | None, error: BaseException | None, result: Any
) -> None:
    """``settle`` first (it records the outcome whoever still waits), then the future."""
    if settle is not None:
        settle(error)
    if fut.done():  # the appender was cancelled; ``settle`` has recorded the outcome
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


def _join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join()
