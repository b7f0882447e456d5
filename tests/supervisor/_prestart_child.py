"""A process that starts (or resumes) run ``run-1`` and serves it until it rests.

``python -m tests.supervisor._prestart_child ROOT LEDGER POLICY``: one tool call of a tool with
replay policy POLICY, then a text. Each real run of the tool appends its attempt number to
LEDGER. The test arms ``TETHER_CRASH_AT`` in the environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

import tether
from tether.supervisor import Supervisor


def app(ledger: Path, policy: str) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy=tether.ReplayPolicy(policy))
    async def refund(order: str, ctx: tether.ToolContext) -> str:
        """Refund an order (each real run is written to the ledger)."""
        with ledger.open("a") as f:
            f.write(f"{ctx.attempt}\n")
        return "refunded"

    model = tether.ScriptedModel(
        [[tether.ScriptedModel.tool_use("toolu_1", "refund", {"order": "A-7"})], "done"]
    )
    return model, tools


async def main(root: Path, ledger: Path, policy: str) -> None:
    model, tools = app(ledger, policy)
    store = tether.FileStore(root)
    async with Supervisor(store, model=model, tools=tools) as sup:
        if not await store.exists("run-1"):
            await sup.start("run-1", "refund order A-7")
        print((await sup.wait("run-1", timeout=30)).value, flush=True)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
