"""Create a run for the worker, or follow one: ``python enqueue.py RUN_ID``.

This process drives nothing (``resume=False``): the run is created with ``drive=False`` and a
``tether worker`` on the same store advances it. ``sup.wait`` follows it through its journal.
"""

from __future__ import annotations

import sys

import anyio
from approval import build

import tether


async def main(run_id: str) -> None:
    app = build()  # the same model and tools as the worker: the run pins them
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=app.model, tools=app.tools, resume=False) as sup:
        if not await store.exists(run_id):
            await sup.start(run_id, "Ticket KITE-142 just came in.", drive=False)
            print(f"created {run_id}; the worker drives it")
        status = await sup.wait(run_id, timeout=60)
        print(f"{run_id}: {status.value}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
