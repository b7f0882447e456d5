"""DBOS: a workflow whose model and tool calls are ``@DBOS.step``s, its system database on
SQLite (DBOS's own settings). DBOS is imported when the case runs (``NEEDS``); it is not a
tether dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import sqlite3
from pathlib import Path
from typing import Any

from _agent import SlowModel, tool_result_message, tool_uses, trivial_tool
from _resources import Sampler, settle, timed_fan_out
from _scale_result import CaseResult

from tether.models import Message, blocks_of, text_of

NEEDS = ("dbos",)


async def case_dbos(res: CaseResult, root: Path) -> None:
    dbos_mod: Any = importlib.import_module("dbos")
    res.notes.append(f"dbos {importlib.metadata.version('dbos')}")
    DBOS = dbos_mod.DBOS
    model = SlowModel(res.latency_ms / 1000)
    tool_calls = 0

    async def ask_model(messages: list[Message]) -> Message:
        reply = await model(system=None, messages=messages, tools=[])
        return reply.as_message()

    async def call_tool(item: str) -> dict[str, Any]:
        nonlocal tool_calls
        tool_calls += 1
        return await trivial_tool(item)

    model_step: Any = DBOS.step()(ask_model)
    tool_step: Any = DBOS.step()(call_tool)

    async def run_agent(prompt: str) -> str:
        messages: list[Message] = [{"role": "user", "content": prompt}]
        while True:
            message = await model_step(messages)
            messages.append(message)
            uses = tool_uses(message)
            if not uses:
                return "".join(text_of(blocks_of(message)))
            results = [(u["id"], await tool_step(u["input"]["item"])) for u in uses]
            messages.append(tool_result_message(results))

    agent: Any = DBOS.workflow()(run_agent)

    url = f"sqlite:///{root / 'dbos.sqlite'}"
    DBOS(config={"name": "tether-bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()
    sampler = Sampler()
    finished = 0
    try:
        res.baseline_rss, res.baseline_fds = settle()

        async def one(i: int) -> None:
            nonlocal finished
            with dbos_mod.SetWorkflowID(f"run-{i:05d}"):
                await agent(f"job {i}")
            finished += 1

        res.wall_s = await timed_fan_out(res.runs, one, sampler)
    finally:
        DBOS.destroy()
    with contextlib.closing(sqlite3.connect(root / "dbos.sqlite")) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    res.notes.append(f"journal_mode = {mode}, synchronous = SQLite default")
    res.completed = finished
    res.steps = model.calls + tool_calls
    res.take(sampler)


def run(res: CaseResult, root: Path) -> None:
    asyncio.run(case_dbos(res, root))  # DBOS runs on asyncio itself, not through anyio
