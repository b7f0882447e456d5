"""``python -m tests.supervisor._hog_child ROOT``: under a descriptor limit of 64, a tool takes
every descriptor left (as a leaky library would) and lets them go a moment later; meanwhile its
own result goes to the blob store and ten more runs are started. Prints one JSON line: how the
runs ended, how often each was restarted, and what was logged.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from collections import Counter
from pathlib import Path

import anyio

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import Supervisor, fold

HOLD = 0.5  # seconds the descriptors stay taken
RUNS = 10


class Tally(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


async def main(root: Path) -> None:
    tally = Tally()
    logging.getLogger("tether").addHandler(tally)
    logging.getLogger("tether").setLevel(logging.INFO)
    hogged: list[int] = []
    taken = anyio.Event()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def hog(item: str) -> str:
        """Take every descriptor left, then answer with a page for the blob store."""
        if not taken.is_set():
            try:
                while True:
                    hogged.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            taken.set()
        return item * 40_000

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        if len(messages) == 1:
            return [tether.ScriptedModel.tool_use("toolu_1", "hog", {"item": "xy"})]
        return "done"

    store = tether.FileStore(root)
    async with Supervisor(store, model=tether.ScriptedModel(script), tools=tools) as sup:
        await sup.start("hog", "take them all")
        await taken.wait()
        took = len(hogged)

        async def let_go() -> None:
            await anyio.sleep(HOLD)
            while hogged:
                os.close(hogged.pop())

        ids = ["hog", *(f"run-{i}" for i in range(RUNS))]
        async with anyio.create_task_group() as tg:
            tg.start_soon(let_go)
            for run_id in ids[1:]:
                tg.start_soon(sup.start, run_id, "go")
        statuses = Counter([(await sup.wait(run_id, timeout=60)).value for run_id in ids])
        restarts = sum([fold(await store.read(run_id)).restarts for run_id in ids])
    print(
        json.dumps(
            {"took": took, "statuses": statuses, "restarts": restarts, "log": tally.lines[-50:]}
        )
    )


if __name__ == "__main__":
    _hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, _hard))
    anyio.run(main, Path(sys.argv[1]))
