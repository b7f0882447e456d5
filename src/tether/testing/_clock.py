"""``VirtualClock``: wall-clock time for tests, which moves only when a test (or autojump) says.

A test of a one-hour durable timer, an approval deadline or a backoff should not wait an hour,
nor sleep for real and hope the machine is fast enough. Hand the supervisor a virtual clock
(``Supervisor(store, model=..., clock=VirtualClock())``): every deadline, timer, backoff and
record's ``at`` it derives then follows that clock, and the test moves time itself.

Two ways to move it, as trio's ``MockClock`` has:

- ``advance(seconds)``: time jumps forward; every sleeper whose time came wakes, in the order
  of their wake times (those due at the same time in the order they began to sleep).
- autojump (``autojump_threshold`` set): when every other task of the event loop is blocked
  (each waits on something: the clock, an event, a lock, a thread, a socket, a real sleep)
  and has stayed so for ``autojump_threshold`` seconds of real time, time jumps to the
  earliest sleeper's wake time. At ``0`` it jumps as soon as everything is blocked, so a
  test of an hour-long timer takes milliseconds.

How idleness is seen: the sleeper due first checks the other tasks of the loop, the way
``anyio.wait_all_tasks_blocked`` does on asyncio (a task is blocked while it awaits a future
that is not done). A task waiting on a worker thread (a journal's ``fsync``) counts as blocked,
as a task waiting on I/O does for trio's clock: with a threshold of 0, time may jump while
such a call is in flight. A test in which something real must happen before a deadline
passes should move time by hand (``advance``), or set a threshold that covers it.

The clock runs on asyncio (the runtime's only loop) and in one event loop. It starts no task
and no thread: the waiting is done by the sleepers themselves, so nothing outlives a test.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from typing import final

import anyio
import anyio.lowlevel

START = 1_767_225_600.0
"""The default start: 2026-01-01 00:00:00 UTC (a fixed time, so runs are reproducible)."""

BUSY_TURNS = 16
"""Looks the first sleeper takes at each turn of the loop while some task is still running,
before it waits ``BUSY_POLL`` between looks."""

BUSY_POLL = 0.001
"""Real seconds the first sleeper waits between looks once ``BUSY_TURNS`` are spent. A real
wait, not a bare checkpoint: it blocks, so two clocks in one loop never keep each other from
seeing the loop idle."""

IDLE_POLL = 0.01
"""Real seconds between looks while the loop is idle and a threshold has not passed yet."""


@final
class _Sleeper:
    __slots__ = ("deadline", "gone", "nudge", "woken")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.woken = False
        self.gone = False  # its sleep was cancelled: skipped when it reaches the heap's top
        self.nudge: anyio.Event | None = None  # set to wake it, or to make it look again


@final
class VirtualClock:
    """Virtual wall-clock time for tests: it moves only by ``advance`` or by autojump.

    It is a ``tether.supervisor.Clock``: pass it as ``Supervisor(clock=...)``; its ``time``
    fits wherever a ``clock`` callable is taken (``tether.operate``'s verbs, the console).

    Args:
        start: the time it shows first, in seconds since the epoch (2026-01-01 UTC unless
            given).
        autojump_threshold: ``None`` (the default): time moves only by ``advance``. A number
            of real seconds: once every other task of the loop has been blocked that long,
            time jumps to the earliest sleeper's wake time (``0``: at once). It can be
            changed later.

    Raises:
        ValueError: ``start`` is not finite, or the threshold is negative or not a number.

    >>> clock = VirtualClock(start=100.0)
    >>> clock.advance(5)
    >>> clock.time()
    105.0
    """

    def __init__(self, start: float = START, *, autojump_threshold: float | None = None) -> None:
        if not (isinstance(start, int | float) and math.isfinite(start)):
            raise ValueError(f"a VirtualClock starts at a finite time, got {start!r}")
        self._now = float(start)
        self._heap: list[tuple[float, int, _Sleeper]] = []
        self._order = itertools.count()
        self._changes = 0  # bumped when a sleep begins or ends, or time moves
        self._threshold: float | None = None
        self.autojump_threshold = autojump_threshold

    def __repr__(self) -> str:
        return (
            f"VirtualClock(time={self._now!r}, sleepers={self.sleepers}, "
            f"autojump_threshold={self._threshold!r})"
        )

    @property
    def autojump_threshold(self) -> float | None:
        """Real seconds of idleness before time jumps to the next wake time; ``None``: never.

        Raises:
            ValueError: set to a negative number or not a number.
        """
        return self._threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float | None) -> None:
        if value is not None and not (
            isinstance(value, int | float) and not math.isnan(value) and value >= 0
        ):
            raise ValueError(f"autojump_threshold must be None or >= 0 seconds, got {value!r}")
        self._threshold = None if value is None or math.isinf(value) else float(value)
        top = self._top()
        if top is not None:
            self._poke(top)  # the sleeper due first starts (or stops) watching for idleness

    @property
    def sleepers(self) -> int:
        """How many tasks sleep on this clock now."""
        return sum(1 for _, _, s in self._heap if not s.gone and not s.woken)

    @property
    def next_wake(self) -> float | None:
        """The earliest time a sleeper waits for, or ``None`` if nobody sleeps."""
        top = self._top()
        return None if top is None else top.deadline

    def time(self) -> float:
        """The virtual time now, in seconds since the epoch."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and wake every sleeper whose time came, in the order of
        their wake times (ties in the order they began to sleep). The woken tasks run at the
        loop's next turn, and all see the new time.

        Raises:
            ValueError: ``seconds`` is negative or not finite (time never goes back).
        """
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"a VirtualClock advances by a finite number >= 0, got {seconds!r}")
        self._now += float(seconds)
        self._changes += 1
        self._wake_due()

    async def sleep(self, seconds: float) -> None:
        """Return once the clock has moved on by ``seconds`` (at least: never early). For 0 or
        less, a checkpoint only, as ``anyio.sleep(0)``.

        Raises:
            ValueError: ``seconds`` is NaN.

        On cancellation: raises at once, and the sleep is forgotten (it no longer holds
        autojump back, nor counts in ``sleepers``).
        """
        if math.isnan(seconds):
            raise ValueError("a VirtualClock cannot sleep NaN seconds")
        await anyio.lowlevel.checkpoint()  # a sleep is always a checkpoint, as anyio's
        if seconds <= 0:
            return
        me = _Sleeper(self._now + seconds)
        before = self._top()
        heapq.heappush(self._heap, (me.deadline, next(self._order), me))
        self._changes += 1
        if before is not None and self._top() is me:
            self._poke(before)  # no longer the first due: it stops watching for idleness
        try:
            while not me.woken:
                if self._threshold is not None and self._top() is me and me.deadline < math.inf:
                    await self._jump_when_idle(me)  # (a sleep forever is no time to jump to)
                else:
                    me.nudge = anyio.Event()
                    await me.nudge.wait()
        finally:
            me.nudge = None
            if not me.woken:  # cancelled: let the next one due watch the loop instead
                me.gone = True
                self._changes += 1
                top = self._top()
                if top is not None:
                    self._poke(top)

    # ------------------------------------------------------------------ internals

    def _top(self) -> _Sleeper | None:
        """The sleeper due first (cancelled and woken ones are dropped from the heap's top)."""
        heap = self._heap
        while heap and (heap[0][2].gone or heap[0][2].woken):
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    @staticmethod
    def _poke(sleeper: _Sleeper) -> None:
        if sleeper.nudge is not None:
            sleeper.nudge.set()

    def _wake_due(self) -> None:
        heap = self._heap
        while heap and (heap[0][2].gone or heap[0][2].woken or heap[0][0] <= self._now):
            _, _, sleeper = heapq.heappop(heap)
            if not sleeper.gone and not sleeper.woken:
                sleeper.woken = True
                self._poke(sleeper)
        top = self._top()
        if top is not None:
            self._poke(top)  # the next one due takes over watching for idleness

    async def _jump_when_idle(self, me: _Sleeper) -> None:
        """As the sleeper due first: jump to its time once the loop has been idle for the
        threshold. Returns when it woke, or when it is no longer the first (another sleeper
        due earlier came, or autojump was turned off)."""
        idle_since: float | None = None
        seen = self._changes
        busy = 0
        while not me.woken and self._threshold is not None and self._top() is me:
            if not _others_blocked():
                idle_since = None
                busy += 1
                if busy <= BUSY_TURNS:
                    await anyio.lowlevel.checkpoint()  # the others run a step: look again
                else:
                    await self._pause(me, BUSY_POLL)
                continue
            busy = 0
            real = time.monotonic()
            if idle_since is None or self._changes != seen:
                idle_since, seen = real, self._changes
            if real - idle_since >= self._threshold:
                # A cancellation of this sleeper that has not been delivered yet (it was
                # scheduled to run when it came) is taken now, before time moves for it.
                await anyio.lowlevel.checkpoint_if_cancelled()
                if me.woken or self._top() is not me or not _others_blocked():
                    continue
                self._now = max(self._now, me.deadline)
                self._changes += 1
                self._wake_due()
                return
            await self._pause(me, min(IDLE_POLL, self._threshold - (real - idle_since)))

    @staticmethod
    async def _pause(me: _Sleeper, seconds: float) -> None:
        """Wait ``seconds`` of real time, or less if ``me`` is woken or poked meanwhile (so
        an ``advance`` wakes it in its turn, not at its next look)."""
        me.nudge = anyio.Event()
        with anyio.move_on_after(seconds):
            await me.nudge.wait()
        me.nudge = None


def _others_blocked() -> bool:
    """Whether every other task of the running loop awaits a future that is not done (the test
    ``anyio.wait_all_tasks_blocked`` makes on asyncio)."""
    this = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is this:
            continue
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is None or waiter.done():
            return False
    return True
