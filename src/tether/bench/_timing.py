"""Counting durable records during a fixed window, on threads or on tasks.

Every worker loops on its step, adding to its own counter after each step returns (after the
record is durable). A timer waits out the warm-up, reads the counters and the clock, waits the
window, reads them again and tells the workers to stop: what is counted is what finished
inside the window, whatever the workers were doing when it opened or closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio


@dataclass(frozen=True)
class Window:
    """How long one measurement warms up and then counts, in seconds."""

    warmup: float
    duration: float


@dataclass(frozen=True)
class Sample:
    """Records made durable during one measurement window."""

    records: int
    seconds: float

    @property
    def rate(self) -> float:
        """Records per second (0 for an empty window)."""
        return self.records / self.seconds if self.seconds > 0 else 0.0


class _Tally:
    """Per-worker record counters read by the timer, and the flag that stops the workers.

    Each worker writes only its own slot, so the counters need no lock: the timer reads a sum
    that is at most one step behind, at both ends of the window alike.
    """

    def __init__(self, workers: int) -> None:
        self.counts = [0] * workers
        self.stop = False
        self._sample: Sample | None = None

    def total(self) -> int:
        return sum(self.counts)

    def finish(self, records: int, seconds: float) -> None:
        self._sample = Sample(records, seconds)
        self.stop = True

    def result(self) -> Sample:
        if self._sample is None:
            raise RuntimeError("the measurement window never closed")
        return self._sample


def run_threads(steps: Sequence[Callable[[], object]], window: Window, per_step: int) -> Sample:
    """Call each step in a loop on its own thread until the window closes.

    ``per_step`` is the number of records one step makes durable.

    Raises:
        BaseException: the first error a step raised (every thread is stopped and joined).
    """
    tally = _Tally(len(steps))
    errors: list[BaseException] = []

    def loop(i: int, step: Callable[[], object]) -> None:
        try:
            while not tally.stop:
                step()
                tally.counts[i] += per_step
        except BaseException as exc:  # handed to the caller below, after the join
            errors.append(exc)
            tally.stop = True

    threads = [threading.Thread(target=loop, args=(i, s)) for i, s in enumerate(steps)]
    for t in threads:
        t.start()
    time.sleep(window.warmup)
    c0, t0 = tally.total(), time.perf_counter()
    time.sleep(window.duration)
    c1, t1 = tally.total(), time.perf_counter()
    tally.finish(c1 - c0, t1 - t0)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return tally.result()


async def run_tasks(
    steps: Sequence[Callable[[], Awaitable[object]]], window: Window, per_step: int
) -> Sample:
    """Await each step in a loop in its own task until the window closes.

    On cancellation: the steps' task group is cancelled with the caller.
    """
    tally = _Tally(len(steps))

    async def loop(i: int, step: Callable[[], Awaitable[object]]) -> None:
        while not tally.stop:
            await step()
            tally.counts[i] += per_step

    async with anyio.create_task_group() as tg:
        for i, step in enumerate(steps):
            tg.start_soon(loop, i, step)
        await anyio.sleep(window.warmup)
        c0, t0 = tally.total(), time.perf_counter()
        await anyio.sleep(window.duration)
        c1, t1 = tally.total(), time.perf_counter()
        tally.finish(c1 - c0, t1 - t0)
    return tally.result()
