"""``python -m tests.supervisor._outage_child ROOT start|resume``: a run whose tool's service
is down.

The store is ``ROOT/store``. ``start`` creates the run on a ``VirtualClock`` that never moves
(so its one try stays its only one: the kill cannot land mid-try), and prints ``waiting``
once the run rests for the service (then idles until killed). ``resume`` serves the store on
a ``VirtualClock`` that jumps whenever everything waits, with the service down for two more
tries and then up, until the run is done, and prints what its journal says as JSON.
"""

from __future__ import annotations

import json
import pathlib
import sys

import anyio

import tether
from tether.journal import Resumed, ToolFailed, ToolStarted
from tether.supervisor import RunStatus, Supervisor, fold
from tether.testing import VirtualClock

use = tether.ScriptedModel.tool_use
RUN = "run-1"


def app(root: pathlib.Path, down: int) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()
    tries: list[int] = []

    @tools.tool(policy="escalate")
    async def search(query: str, ctx: tether.ToolContext) -> str:
        """Search the docs."""
        tries.append(ctx.attempt)
        if len(tries) <= down:
            raise tether.ToolUnavailableError("search", "connection refused", attempt=ctx)
        with open(root / "ledger", "a") as f:
            f.write(f"search {query} attempt {ctx.attempt}\n")
        return f"3 pages about {query}"

    model = tether.ScriptedModel([[use("toolu_1", "search", {"query": "leases"})], "found"])
    return model, tools


async def main(root: pathlib.Path, mode: str) -> None:
    store = tether.FileStore(root / "store")
    if mode == "start":
        model, tools = app(root, down=1_000)
        async with Supervisor(store, model=model, tools=tools, clock=VirtualClock()) as sup:
            await sup.start(RUN, "find the docs on leases")
            assert await sup.wait(RUN, timeout=30) is RunStatus.SLEEPING
            print("waiting", flush=True)
            await anyio.sleep_forever()
    model, tools = app(root, down=2)
    clock = VirtualClock(autojump_threshold=0)
    async with Supervisor(store, model=model, tools=tools, sweep_interval=0.2, clock=clock) as sup:
        with anyio.fail_after(30):
            while (await sup.inspect(RUN)).status is not RunStatus.DONE:
                await anyio.sleep(0.02)
    async with tether.FileStore(root / "store") as check:
        events = await check.read(RUN)
    state = fold(events)
    print(
        json.dumps(
            {
                "status": state.finished.status if state.finished else None,
                "attempts": [e.attempt for e in events if isinstance(e, ToolStarted)],
                "unsent": [e.attempt for e in events if isinstance(e, ToolFailed) and e.unsent],
                "resumed": [e.cause for e in events if isinstance(e, Resumed)],
                "restarts": state.restarts,
                "tool_calls": state.tool_calls,
                "final_text": state.final_text,
            }
        )
    )


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]), sys.argv[2])
