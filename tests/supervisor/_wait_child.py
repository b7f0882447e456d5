"""``python -m tests.supervisor._wait_child ROOT start|resume``: a run whose call sleeps 2 s.

The store is ``ROOT/store``, or the PostgreSQL schema ``TETHER_TEST_STORE`` names.
``start`` creates it and prints ``waiting`` once it parks (then idles until killed);
``resume`` serves the store until the run is done and prints ``done after S``, S the seconds
from the start of the sleep to the wake-up, read from the journal.
"""

from __future__ import annotations

import pathlib
import sys

import anyio

import tether
from tether.journal import ToolResult, Waiting
from tether.supervisor import RunStatus, Supervisor

from ._helpers import child_store

use = tether.ScriptedModel.tool_use


def app() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def check_later(order: str) -> tether.Wait:
        """Check an order again in a while."""
        return tether.sleep_for(2.0, result=f"{order} checked again")

    model = tether.ScriptedModel([[use("toolu_1", "check_later", {"order": "o-1"})], "done"])
    return model, tools


async def main(root: pathlib.Path, mode: str) -> None:
    model, tools = app()
    async with Supervisor(child_store(root), model=model, tools=tools, sweep_interval=0.2) as sup:
        if mode == "start":
            await sup.start("run-1", "check o-1")
            assert await sup.wait("run-1", timeout=30) is RunStatus.SLEEPING
            print("waiting", flush=True)
            await anyio.sleep_forever()
        with anyio.fail_after(30):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.02)
    async with child_store(root) as check:
        journal = await check.read("run-1")
    waiting = next(e for e in journal if isinstance(e, Waiting))
    result = next(e for e in journal if isinstance(e, ToolResult))
    print(f"done after {result.at - waiting.at:.2f}", flush=True)


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]), sys.argv[2])
