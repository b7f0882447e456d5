"""One timer for every parked run: its next wake-up, approval deadlines and run deadlines.

A parked run holds no task (docs/design/runtime.md: parked runs cost no task and no
descriptor), so its deadlines cannot sleep in a task of their own. The supervisor keeps one
heap of wake-up times and one task that sleeps until the earliest; a run woken for nothing (it
moved on meanwhile) is left as it is by the supervisor's own check.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable
from typing import final

import anyio

from .._backoff import sleep_unless

COMPACT_SLACK = 64
"""Stale times the heap may hold beyond as many as live ones before it is rebuilt."""


@final
class Timers:
    """Wake-up times by run, served by ``serve`` (run it in the supervisor's task group).

    Args:
        clock: wall-clock time, as the runs' deadlines are written in it.
        sleep: the supervisor's (injectable) sleep; a sleep that returns at once (tests) fires
            the earliest timer at once, as the real one would after waiting.
        fire: called with a run id when its time has come.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        fire: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._fire = fire
        self._heap: list[tuple[float, str]] = []
        self._next: dict[str, float] = {}  # the earliest time each run is due
        self._changed = anyio.Event()

    def __len__(self) -> int:
        return len(self._next)

    def forget(self, run_id: str) -> None:
        """Drop the run's wake-up (it finished). The heap keeps stale times only while they
        are at most half of it, so finished runs with far deadlines do not pile up there."""
        if self._next.pop(run_id, None) is None:
            return
        if len(self._heap) > 2 * len(self._next) + COMPACT_SLACK:
            self._heap = [(when, run) for run, when in self._next.items()]
            heapq.heapify(self._heap)
            self._changed.set()  # ``serve`` looks at the new heap's earliest time

    def at(self, when: float, run_id: str) -> None:
        """Wake ``run_id`` at wall-clock ``when`` (kept if it is due earlier already)."""
        due = self._next.get(run_id)
        if due is not None and due <= when:
            return
        self._next[run_id] = when
        heapq.heappush(self._heap, (when, run_id))
        self._changed.set()

    async def serve(self) -> None:
        """Fire each run at its time, for as long as the task runs.

        On cancellation: stops; the times left are forgotten (a later sweep finds them again).
        """
        while True:
            while self._heap and self._next.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # superseded by an earlier time for the same run
            if not self._heap:
                await self._changed.wait()
                self._changed = anyio.Event()
                continue
            when, run_id = self._heap[0]
            changed = self._changed
            await sleep_unless(changed, self._sleep, when - self._clock())
            if changed.is_set():  # an earlier time came in: look again
                self._changed = anyio.Event()
                continue
            if self._next.get(run_id) != when:
                continue  # forgotten while it slept: looked at again at the top
            heapq.heappop(self._heap)
            del self._next[run_id]
            self._fire(run_id)
