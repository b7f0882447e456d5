"""``python -m tests.supervisor._many_starts_child ROOT N``: start N runs at once under a
descriptor limit of 256, then wait for all of them; prints ``done N`` (exit 0) or the error."""

from __future__ import annotations

import resource
import sys

import anyio

import tether
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor


async def main(root: str, n: int) -> None:
    all_started = anyio.Event()

    async def answer(messages: list[Message]) -> str:
        await all_started.wait()  # every slot stays busy while the starts go on
        return "done"

    model = tether.ScriptedModel(answer)
    async with Supervisor(tether.FileStore(root), model=model) as sup:
        for i in range(n):
            await sup.start(f"run-{i:05d}", "go")
        all_started.set()
        statuses = [await sup.wait(f"run-{i:05d}", timeout=300) for i in range(n)]
    done = sum(s is RunStatus.DONE for s in statuses)
    print(f"done {done}")


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
