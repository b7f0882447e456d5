"""``python -m tests.supervisor._wait_child ROOT start|resume [LATER]``: a run whose call
sleeps an hour.

The store is ``ROOT/store``, or the PostgreSQL schema ``TETHER_TEST_STORE`` names.
``start`` creates it (on the real clock) and prints ``waiting`` once it parks (then idles
until killed); ``resume`` serves the store on a ``VirtualClock`` that starts ``LATER`` seconds
after the real now and jumps whenever everything waits, until the run is done, and prints
``done after S, clock moved M``: S the seconds from the start of the sleep to the wake-up,
read from the journal, M how far the virtual clock moved before the run woke.
"""

from __future__ import annotations

import pathlib
import sys
import time

import anyio

import tether
from tether.journal import ToolResult, Waiting
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import child_store

use = tether.ScriptedModel.tool_use
SLEEP = 3600.0


def app() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def check_later(order: str) -> tether.Wait:
        """Check an order again in a while."""
        return tether.sleep_for(SLEEP, result=f"{order} checked again")

    model = tether.ScriptedModel([[use("toolu_1", "check_later", {"order": "o-1"})], "done"])
    return model, tools


async def main(root: pathlib.Path, mode: str, later: float) -> None:
    model, tools = app()
    if mode == "start":
        async with Supervisor(child_store(root), model=model, tools=tools) as sup:
            await sup.start("run-1", "check o-1")
            assert await sup.wait("run-1", timeout=30) is RunStatus.SLEEPING
            print("waiting", flush=True)
            await anyio.sleep_forever()
    clock = VirtualClock(start=time.time() + later, autojump_threshold=0)
    began = clock.time()
    async with Supervisor(
        child_store(root), model=model, tools=tools, sweep_interval=0.2, clock=clock
    ) as sup:
        with anyio.fail_after(30):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.02)
    async with child_store(root) as check:
        journal = await check.read("run-1")
    waiting = next(e for e in journal if isinstance(e, Waiting))
    result = next(e for e in journal if isinstance(e, ToolResult))
    print(f"done after {result.at - waiting.at:.2f}, clock moved {result.at - began:.2f}")


if __name__ == "__main__":
    later = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    anyio.run(main, pathlib.Path(sys.argv[1]), sys.argv[2], later)
