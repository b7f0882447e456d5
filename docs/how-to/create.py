"""Create a run for the workers, and return: ``python create.py RUN_ID [MAX_MODEL_CALLS]``."""

from __future__ import annotations

import sys

import anyio
from approval import build

import tether


async def main(run_id: str, max_model_calls: int) -> None:
    app = build()
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=app.model, tools=app.tools, resume=False) as sup:
        budgets = tether.Budgets(max_model_calls=max_model_calls)
        await sup.start(run_id, "Ticket KITE-142 just came in.", budgets=budgets, drive=False)
    print(f"created {run_id}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
