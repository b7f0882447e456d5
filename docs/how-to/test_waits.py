"""A durable timer tested on a virtual clock: a day's wait in milliseconds (``pytest``)."""

from __future__ import annotations

import pathlib

import anyio

import tether
from tether.supervisor import RunStatus
from tether.testing import VirtualClock

DAY = 24 * 3600.0


def follow_up_agent() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def follow_up(order: str) -> tether.Wait:
        """Look at the order again tomorrow."""
        return tether.sleep_for(DAY, result=f"{order} looked at again")

    use = tether.ScriptedModel.tool_use
    model = tether.ScriptedModel([[use("toolu_1", "follow_up", {"order": "o-1"})], "followed up"])
    return model, tools


async def done(sup: tether.Supervisor) -> bool:
    """Whether the run is done within 10 s of real time (the supervisor's timer wakes it)."""
    for _ in range(1000):
        if (await sup.inspect("o-1")).status is RunStatus.DONE:
            return True
        await anyio.sleep(0.01)
    return False


def test_the_follow_up_waits_a_day_and_not_a_second_less(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        model, tools = follow_up_agent()
        clock = VirtualClock()  # time moves only when the test says
        store = tether.FileStore(tmp_path)
        async with tether.Supervisor(store, model=model, tools=tools, clock=clock) as sup:
            await sup.start("o-1", "Follow up on order o-1.")
            assert await sup.wait("o-1", timeout=10) is RunStatus.SLEEPING
            clock.advance(DAY - 1)
            assert (await sup.inspect("o-1")).status is RunStatus.SLEEPING
            clock.advance(1)
            assert await done(sup)

    anyio.run(main)


def test_with_autojump_nobody_moves_the_clock(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        model, tools = follow_up_agent()
        clock = VirtualClock(autojump_threshold=0)  # jumps whenever everything waits
        store = tether.FileStore(tmp_path)
        async with tether.Supervisor(store, model=model, tools=tools, clock=clock) as sup:
            await sup.start("o-1", "Follow up on order o-1.")
            assert await done(sup)
        assert clock.time() >= VirtualClock().time() + DAY

    anyio.run(main)
