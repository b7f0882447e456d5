"""``python -m tests.supervisor._stop_child ROOT``: start (or resume) a run whose first answer
is cut off by ``max_tokens`` inside an email call; prints ``done sent=[...]`` when it ends.

The emails the tool sent are kept in ``ROOT/sent`` (one per line), so a process killed after
the answer was saved and a process resuming it share the outside world.
"""

from __future__ import annotations

import contextlib
import pathlib
import sys
from typing import Any

import anyio

import tether
from tether.supervisor import Supervisor

use = tether.ScriptedModel.tool_use
SCRIPT: list[Any] = [
    tether.ScriptedModel.stopped(
        "max_tokens", [use("toolu_1", "send_email", {"to": "dana", "body": "Hi Dana, we have"})]
    ),
    [use("toolu_2", "send_email", {"to": "dana", "body": "Hi Dana, done."})],
    "sent",
]


async def main(root: pathlib.Path) -> None:
    sent = root / "sent"
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        with sent.open("a") as f:
            f.write(body + "\n")
        return "sent"

    model = tether.ScriptedModel(SCRIPT)
    async with Supervisor(tether.FileStore(root / "store"), model=model, tools=tools) as sup:
        with contextlib.suppress(tether.RunExistsError):
            await sup.start("run-1", "write to dana")
        await sup.wait("run-1", timeout=30)
    lines = sent.read_text().splitlines() if sent.exists() else []
    print(f"done sent={lines!r}")


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]))
