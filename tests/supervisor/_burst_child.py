"""``python -m tests.supervisor._burst_child ROOT N LIMIT``: under a descriptor limit of LIMIT,
start N runs at once (as a web service receiving a burst does, from one task group), wait for
all of them, then park N more for a person; print what happened as one JSON line.

Each run calls a tool whose result is large enough for the blob store, so that blobs are
written and read back too. The store is a ``FileStore`` in ``ROOT/store``, or the PostgreSQL
schema ``TETHER_TEST_STORE`` names (``_helpers.child_store``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections import Counter
from pathlib import Path

import anyio

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import RunStatus, Supervisor

from ._helpers import child_store

BIG = 70 * 1024  # over the default blob threshold


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def app() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def fetch(item: str) -> str:
        """Fetch an item's page."""
        return item * (BIG // len(item))

    @tools.tool(policy="rerun", approval=True)
    async def publish(item: str) -> str:
        """Publish an item, once a person agrees."""
        return f"published {item}"

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        if len(messages) == 1:
            prompt = str(messages[0]["content"])
            tool, _, item = prompt.partition(" ")
            return [tether.ScriptedModel.tool_use("toolu_1", tool, {"item": item})]
        return "done"

    return tether.ScriptedModel(script), tools


async def wait_all(sup: Supervisor, ids: list[str]) -> Counter[str]:
    """How many of the runs ``ids`` rest in each status (or why waiting failed)."""
    found: Counter[str] = Counter()
    for run_id in ids:
        try:
            found[(await sup.wait(run_id, timeout=300)).value] += 1
        except Exception as exc:
            found[type(exc).__name__] += 1
    return found


async def main(root: Path, n: int) -> None:
    model, tools = app()
    failed: Counter[str] = Counter()
    async with Supervisor(child_store(root), model=model, tools=tools) as sup:

        async def start(run_id: str, prompt: str) -> None:
            try:
                await sup.start(run_id, prompt)
            except Exception as exc:
                failed[f"{type(exc).__name__}: ...{str(exc)[-60:]}"] += 1

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(start, f"run-{i:05d}", f"fetch item-{i:05d}")
        statuses = await wait_all(sup, [f"run-{i:05d}" for i in range(n)])
        before_parking = open_fds()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(start, f"parked-{i:05d}", f"publish item-{i:05d}")
        parked = await wait_all(sup, [f"parked-{i:05d}" for i in range(n)])
        parked_fds = open_fds() - before_parking
    print(
        json.dumps(
            {
                "failed": sum(failed.values()),
                "errors": failed.most_common(3),
                "statuses": statuses,
                "parked": parked,
                "parked_fds": parked_fds,
                "done": statuses[RunStatus.DONE.value],
            }
        )
    )


if __name__ == "__main__":
    _hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), _hard))
    anyio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
