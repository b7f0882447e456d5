"""The one timer of a supervisor: wake-ups fire in order; a finished run's are forgotten, and
the heap does not keep them (counted, on a virtual clock)."""

from __future__ import annotations

import anyio

from tether.supervisor._timers import COMPACT_SLACK, Timers
from tether.testing import VirtualClock


async def test_forgotten_wake_ups_never_fire_and_leave_the_heap() -> None:
    clock = VirtualClock(start=1_000.0, autojump_threshold=0)
    fired: list[str] = []
    timers = Timers(clock.time, clock.sleep, fired.append)
    runs = [f"run-{i:03d}" for i in range(4 * COMPACT_SLACK)]
    for i, run_id in enumerate(runs):
        timers.at(clock.time() + 10 + i, run_id)
    finished = runs[: 3 * COMPACT_SLACK]
    for run_id in finished:
        timers.forget(run_id)
    assert len(timers) == COMPACT_SLACK
    assert len(timers._heap) <= 2 * len(timers) + COMPACT_SLACK
    timers.forget("never-scheduled")  # nothing to forget: nothing happens
    async with anyio.create_task_group() as tg:
        tg.start_soon(timers.serve)
        with anyio.fail_after(5):
            while len(fired) < COMPACT_SLACK:
                await anyio.sleep(0.001)  # blocked (not spinning), so the clock can jump
        tg.cancel_scope.cancel()
    assert fired == runs[3 * COMPACT_SLACK :]
    assert len(timers) == 0
    assert clock.time() == 1_000.0 + 10 + len(runs) - 1  # each fired at its time, in turn


async def test_a_wake_up_forgotten_while_the_timer_sleeps_on_it_does_not_fire() -> None:
    clock = VirtualClock(start=1_000.0, autojump_threshold=0)
    fired: list[str] = []
    release = anyio.Event()

    async def slow_sleep(seconds: float) -> None:
        await release.wait()
        await clock.sleep(seconds)

    timers = Timers(clock.time, slow_sleep, fired.append)
    timers.at(clock.time() + 5, "finished")
    timers.at(clock.time() + 6, "parked")
    async with anyio.create_task_group() as tg:
        tg.start_soon(timers.serve)
        await anyio.wait_all_tasks_blocked()  # asleep until "finished" is due
        timers.forget("finished")
        release.set()
        with anyio.fail_after(5):
            while not fired:
                await anyio.sleep(0.001)  # blocked (not spinning), so the clock can jump
        tg.cancel_scope.cancel()
    assert fired == ["parked"]
