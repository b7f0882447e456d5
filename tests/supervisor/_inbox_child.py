"""A process that serves one store until run ``run-1`` rests (for the inbox kill test).

``python -m tests.supervisor._inbox_child ROOT LEDGER``: the app is ``app(ledger)`` below; the
test arms ``TETHER_CRASH_AT`` in the environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

import tether
from tether.supervisor import Supervisor


def app(ledger: Path) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key", approval=True)
    async def send(text: str, ctx: tether.ToolContext) -> str:
        """Send a text (each attempt is written to the ledger)."""
        with ledger.open("a") as f:
            f.write(ctx.idempotency_key + "\n")
        return "sent"

    model = tether.ScriptedModel(
        [[tether.ScriptedModel.tool_use("toolu_1", "send", {"text": "hi"})], "done"]
    )
    return model, tools


async def main(root: Path, ledger: Path) -> None:
    model, tools = app(ledger)
    async with Supervisor(tether.FileStore(root), model=model, tools=tools) as sup:
        print((await sup.wait("run-1", timeout=30)).value, flush=True)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]))
