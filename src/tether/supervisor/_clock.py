"""The supervisor's clock: where every time it derives comes from, and how it waits.

Deadlines (a run's ``deadline_s``, an approval's, a wait's timeout), durable timers, backoff
before a restart or a retry, ``retry_at``, a tool's ``timeout`` and the ``at`` of every record
it appends all follow one ``Clock``, so a test can hand the supervisor a virtual one
(``tether.testing.VirtualClock``) and a one-hour timer takes milliseconds. What only polls the
world (sweeps of the store, looks at a run another process holds, PostgreSQL leases, which
follow the database's time) stays on real time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar, final, runtime_checkable

import anyio
import msgspec

from ..journal import Event

T = TypeVar("T")


@runtime_checkable
class Clock(Protocol):
    """Wall-clock time and a way to wait on it: what ``Supervisor(clock=...)`` takes.

    ``time()`` is seconds since the epoch (as ``time.time``); ``sleep(seconds)`` returns once
    ``time()`` has moved on by at least ``seconds`` (at once for 0 or less). ``SystemClock``
    is the real one; ``tether.testing.VirtualClock`` is one for tests.
    """

    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


@final
class SystemClock:
    """The real clock: ``time.time`` and ``anyio.sleep`` (the supervisor's default)."""

    # Seconds since the epoch, now: ``time.time`` itself, asked a few times a step (a method
    # around it was one more Python call each time).
    time = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of real time.

        On cancellation: raises at once.
        """
        await anyio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


async def within(
    clock: Clock, seconds: float, work: Callable[[], Awaitable[T]]
) -> tuple[bool, T | None]:
    """Run ``work``, cancelled once ``seconds`` pass on ``clock``: ``(True, None)`` if it was,
    ``(False, its value)`` if it finished first. ``work``'s exceptions propagate.

    On the real clock this is ``anyio.move_on_after``; on another one a sibling task sleeps
    on that clock and cancels the work.
    """
    if isinstance(clock, SystemClock):
        with anyio.move_on_after(seconds) as scope:
            return False, await work()
        return scope.cancelled_caught, None
    with anyio.CancelScope() as outer:
        async with anyio.create_task_group() as tg:

            async def _alarm() -> None:
                await clock.sleep(seconds)
                outer.cancel()

            tg.start_soon(_alarm)
            value = await work()
            tg.cancel_scope.cancel()
            return False, value
    return True, None


def dated(events: Iterable[Event], now: float) -> list[Event]:
    """``events``, each with its ``at`` set to ``now`` (the supervisor's clock) unless it has
    one already; a store dates only the records that come without one."""
    replace = msgspec.structs.replace
    return [ev if ev.at else replace(ev, at=now) for ev in events]
