"""``VirtualClock``: sleepers wake in the order of their times and never early, by ``advance``
or by autojump; a cancelled sleep is forgotten; nothing is left running after a test."""

from __future__ import annotations

import asyncio
import math
import pathlib
import time

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.supervisor import Clock, SystemClock
from tether.testing import VirtualClock

DURATIONS = st.floats(min_value=0.001, max_value=10_000, allow_nan=False)


async def _settle(woken: list[tuple[int, float]], want: int) -> None:
    """Let the woken sleepers run (each needs a turn or two of the loop), then a few more."""
    with anyio.fail_after(5):
        while len(woken) < want:
            await anyio.lowlevel.checkpoint()
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


@settings(max_examples=60, deadline=None)
@given(
    sleeps=st.lists(st.tuples(st.floats(0, 100), DURATIONS), min_size=1, max_size=12),
    steps=st.lists(st.floats(min_value=0, max_value=3_000), max_size=12),
)
def test_advance_wakes_every_sleeper_whose_time_came_in_order_and_never_early(
    sleeps: list[tuple[float, float]], steps: list[float]
) -> None:
    """Sleepers begin at random times (a first advance each) for random lengths; random
    advances follow. After each advance exactly those due have woken, in the order of their
    wake times (ties in the order they began), each seeing a time at or past its own."""

    async def main() -> None:
        clock = VirtualClock(start=1_000.0)
        woken: list[tuple[int, float]] = []
        deadlines: dict[int, float] = {}

        async def sleeper(i: int, seconds: float) -> None:
            await clock.sleep(seconds)
            woken.append((i, clock.time()))

        async with anyio.create_task_group() as tg:
            for i, (offset, seconds) in enumerate(sorted(sleeps)):
                clock.advance(max(0.0, 1_000.0 + offset - clock.time()))
                deadlines[i] = clock.time() + seconds
                tg.start_soon(sleeper, i, seconds)
                await _settle(woken, sum(d <= clock.time() for d in deadlines.values()))
            for step in [*steps, math.inf]:
                if step == math.inf:  # at last, past every wake time
                    step = max(deadlines.values()) - clock.time() + 1
                clock.advance(max(step, 0.0))
                due = [i for i, d in deadlines.items() if d <= clock.time()]
                await _settle(woken, len(due))
                assert sorted(i for i, _ in woken) == sorted(due)  # all due, none early
        assert len(woken) == len(sleeps)
        for i, at in woken:
            assert at >= deadlines[i]
        order = [i for i, _ in woken]
        # Woken by one advance: in wake-time order. By different advances: in advance order,
        # which is wake-time order too, since each advance wakes everything due.
        assert order == sorted(order, key=lambda i: (deadlines[i], i))

    anyio.run(main)


@settings(max_examples=40, deadline=None)
@given(durations=st.lists(DURATIONS, min_size=1, max_size=10))
def test_autojump_wakes_each_sleeper_exactly_at_its_time_in_order(durations: list[float]) -> None:
    """With autojump at 0 nobody advances: time jumps from one wake time to the next, so each
    sleeper wakes exactly at its own time, however long, in a few real milliseconds."""

    async def main() -> None:
        clock = VirtualClock(start=0.0, autojump_threshold=0)
        woken: list[tuple[float, float]] = []

        async def sleeper(seconds: float) -> None:
            await clock.sleep(seconds)
            woken.append((seconds, clock.time()))

        began = time.monotonic()
        async with anyio.create_task_group() as tg:
            for seconds in durations:
                tg.start_soon(sleeper, seconds)
        assert [at for _, at in woken] == sorted(durations)
        assert all(at == seconds for seconds, at in woken)  # never early, never late
        assert time.monotonic() - began < 5  # virtual hours, not real ones (a loose bound)
        assert clock.sleepers == 0

    anyio.run(main)


async def test_a_one_hour_sleep_takes_no_real_hour_and_sleeps_in_turn() -> None:
    clock = VirtualClock(autojump_threshold=0)
    start = clock.time()
    await clock.sleep(3600)
    assert clock.time() == start + 3600
    for _ in range(3):  # one after another: each from the time the last one woke
        await clock.sleep(60)
    assert clock.time() == start + 3600 + 180


async def test_autojump_waits_while_another_task_works() -> None:
    """A task that is running (not blocked) holds time back: the sleep does not end before
    the busy task's work, which takes many loop turns, is done."""
    clock = VirtualClock(start=0.0, autojump_threshold=0)
    log: list[str] = []

    async def busy() -> None:
        for _ in range(200):
            await anyio.lowlevel.checkpoint()  # runnable all along: never blocked
        log.append(f"worked at {clock.time()}")

    async def sleeper() -> None:
        await clock.sleep(10)
        log.append(f"woke at {clock.time()}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        tg.start_soon(busy)
    assert log == ["worked at 0.0", "woke at 10.0"]


async def test_autojump_threshold_is_real_idleness() -> None:
    """With a threshold, time jumps only after that much real time with every task blocked;
    a real sleep shorter than it (something real finishing first) comes before the jump."""
    clock = VirtualClock(start=0.0, autojump_threshold=0.2)
    log: list[str] = []

    async def real_work() -> None:
        await anyio.sleep(0.05)  # blocked, but for less than the threshold
        log.append(f"real work done at {clock.time()}")

    async def sleeper() -> None:
        await clock.sleep(3600)
        log.append(f"woke at {clock.time()}")

    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        tg.start_soon(real_work)
    assert log == ["real work done at 0.0", "woke at 3600.0"]
    assert time.monotonic() - began >= 0.2


async def test_without_autojump_time_stands_still() -> None:
    clock = VirtualClock(start=5.0)
    with anyio.move_on_after(0.1):  # real time passes; the virtual clock does not
        await clock.sleep(1)
        pytest.fail("woke with nobody advancing the clock")
    assert clock.time() == 5.0
    assert clock.sleepers == 0  # the cancelled sleep was forgotten


async def test_a_cancelled_sleep_is_forgotten_and_the_next_one_jumps() -> None:
    """The sleeper due first is cancelled: autojump goes on to the next one's time, and the
    cancelled one never wakes."""
    clock = VirtualClock(start=0.0, autojump_threshold=0)
    woken: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append(clock.time())

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as first:
            first.cancel()
            await clock.sleep(1)  # cancelled before it can wake
        tg.start_soon(sleeper, 5)
        inner = anyio.CancelScope()

        async def doomed() -> None:
            with inner:
                await clock.sleep(2)
                woken.append(-1.0)

        tg.start_soon(doomed)
        await anyio.lowlevel.checkpoint()
        inner.cancel()
    assert woken == [5.0]


async def test_turning_autojump_on_later_wakes_a_waiting_sleeper() -> None:
    clock = VirtualClock(start=0.0)
    woke = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep(30)
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await anyio.wait_all_tasks_blocked()
        assert (clock.sleepers, clock.next_wake) == (1, 30.0)
        clock.autojump_threshold = 0
        with anyio.fail_after(5):
            await woke.wait()
    assert clock.time() == 30.0
    assert clock.next_wake is None


async def test_the_clock_leaves_no_task_behind() -> None:
    before = len(asyncio.all_tasks())
    clock = VirtualClock(autojump_threshold=0)
    async with anyio.create_task_group() as tg:
        for seconds in (1, 2, 3):
            tg.start_soon(clock.sleep, seconds)
    assert len(asyncio.all_tasks()) == before
    assert clock.sleepers == 0


def test_bad_times_are_refused() -> None:
    with pytest.raises(ValueError, match="finite time"):
        VirtualClock(start=math.nan)
    with pytest.raises(ValueError, match="autojump_threshold"):
        VirtualClock(autojump_threshold=-1)
    clock = VirtualClock()
    for seconds in (-1, math.inf, math.nan):
        with pytest.raises(ValueError, match="advances by a finite number"):
            clock.advance(seconds)
    with pytest.raises(ValueError, match="NaN"):
        anyio.run(clock.sleep, math.nan)


async def test_a_sleep_of_nothing_is_a_checkpoint() -> None:
    clock = VirtualClock(start=7.0)
    await clock.sleep(0)
    await clock.sleep(-3)
    assert clock.time() == 7.0


def test_both_clocks_are_clocks() -> None:
    assert isinstance(VirtualClock(), Clock)
    assert isinstance(SystemClock(), Clock)
    assert abs(SystemClock().time() - time.time()) < 60


async def test_a_timeout_on_the_clock_cuts_a_longer_sleep_short() -> None:
    """A deadline of 60 s around an hour's sleep, both on the clock: the sleep is cancelled
    at 60 s, when the alarm wakes, though the sleeper was due to look at the loop next."""
    clock = VirtualClock(start=0.0, autojump_threshold=0)
    with anyio.CancelScope() as outer:
        async with anyio.create_task_group() as tg:

            async def alarm() -> None:
                await clock.sleep(60)
                outer.cancel()

            tg.start_soon(alarm)
            await clock.sleep(3600)
            pytest.fail("the hour's sleep outlived its deadline")
    assert outer.cancelled_caught
    assert clock.time() == 60.0
    assert clock.sleepers == 0


async def test_two_autojumping_clocks_in_one_loop_do_not_hold_each_other_back() -> None:
    first, second = VirtualClock(start=0.0), VirtualClock(start=0.0)
    first.autojump_threshold = second.autojump_threshold = 0
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.sleep, 100)
            tg.start_soon(second.sleep, 200)
    assert (first.time(), second.time()) == (100.0, 200.0)


def test_a_supervisor_refuses_a_clock_that_is_not_one(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match=r"clock must be a tether.supervisor.Clock .* got <built"):
        tether.Supervisor(
            tether.FileStore(tmp_path),
            model=tether.ScriptedModel(["hi"]),
            clock=time.time,  # type: ignore[arg-type]
        )


async def test_a_sleep_forever_is_no_time_to_jump_to() -> None:
    clock = VirtualClock(start=0.0, autojump_threshold=0)
    with anyio.move_on_after(0.1):  # real time
        await clock.sleep(math.inf)
    assert clock.time() == 0.0
