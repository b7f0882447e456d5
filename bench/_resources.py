"""What a process holds while its runs are in flight: RSS and descriptors, sampled on a thread.

Linux only (``/proc/self``). ``fan_out`` starts the runs and keeps the count of runs in flight
that the sampler reads, so the RSS reported per run is taken when the most were in flight.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import anyio

KiB = 1024


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KiB
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB  # KiB on Linux


def settle() -> tuple[int, int]:
    """RSS and open descriptors after a full collection: a baseline to subtract."""
    gc.collect()
    return rss_bytes(), open_fds()


@dataclass
class Sampler:
    """Samples RSS, open descriptors and runs in flight on a thread, every ``interval`` s."""

    interval: float = 0.01
    in_flight: int = 0
    max_fds: int = 0
    max_rss: int = 0
    busiest: int = 0
    rss_at_busiest: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        rss, fds, n = rss_bytes(), open_fds(), self.in_flight
        self.max_rss, self.max_fds = max(self.max_rss, rss), max(self.max_fds, fds)
        if n > self.busiest or (n == self.busiest and rss > self.rss_at_busiest):
            self.busiest, self.rss_at_busiest = n, rss

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        """Sample until the block ends, and once more then."""
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.sample()


async def fan_out(
    runs: int, one: Callable[[int], Awaitable[None]], sampler: Sampler, batch: int | None = None
) -> None:
    """Run ``one(i)`` for every run, all at once (or ``batch`` at a time), counting in flight."""

    async def tracked(i: int) -> None:
        sampler.in_flight += 1
        try:
            await one(i)
        finally:
            sampler.in_flight -= 1

    step = batch or runs
    for lo in range(0, runs, step):
        async with anyio.create_task_group() as tg:
            for i in range(lo, min(runs, lo + step)):
                tg.start_soon(tracked, i)


async def timed_fan_out(
    runs: int, one: Callable[[int], Awaitable[None]], sampler: Sampler, batch: int | None = None
) -> float:
    """``fan_out`` while ``sampler`` samples; the seconds from the first start to the last end."""
    with sampler.running():
        t0 = time.perf_counter()
        await fan_out(runs, one, sampler, batch)
        return time.perf_counter() - t0
