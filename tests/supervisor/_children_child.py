"""``python -m tests.supervisor._children_child ROOT``: start (or resume) a lead run whose tool
starts a researcher child run; prints ``lead done: ANSWER; researcher answered N time(s)``.

The store is ``ROOT/store``, or the PostgreSQL schema ``TETHER_TEST_STORE`` names. The
researcher's answers are counted in ``ROOT/researcher`` (one line per answer its model
gave), so a test can tell whether a crash made it run twice.
"""

from __future__ import annotations

import contextlib
import pathlib
import sys
from typing import Any

import anyio

import tether
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor

from ._helpers import child_store
from .test_children import PARENT, answer, lead_tools


async def main(root: pathlib.Path) -> None:
    counted = root / "researcher"

    def counting(messages: list[Message]) -> Any:
        if str(messages[0]["content"]).startswith("research"):
            with counted.open("a") as f:
                f.write("answered\n")
        return answer(messages)

    model = tether.ScriptedModel(counting)
    async with Supervisor(
        child_store(root), model=model, tools=lead_tools(), sweep_interval=0.2
    ) as sup:
        with contextlib.suppress(tether.RunExistsError):
            await sup.start(PARENT, "a customer asks about refunds")
        with anyio.fail_after(30):
            while (view := await sup.inspect(PARENT)).status is not RunStatus.DONE:
                await anyio.sleep(0.02)
    times = len(counted.read_text().splitlines()) if counted.exists() else 0
    print(f"lead done: {view.final_text}; researcher answered {times} time(s)")


if __name__ == "__main__":
    anyio.run(main, pathlib.Path(sys.argv[1]))
