"""LangGraph: a two-node ``StateGraph`` (model, tools) checkpointed by ``AsyncSqliteSaver``.

One database with LangGraph's own settings (WAL, SQLite's default ``synchronous``), invoked with
``durability="sync"`` so that a step is saved before the next starts, as tether and DBOS do.
LangGraph is imported when the case runs (``NEEDS``); it is not a tether dependency.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
from _agent import SlowModel, tool_result_message, tool_uses, trivial_tool
from _resources import Sampler, settle, timed_fan_out
from _scale_result import CaseResult

NEEDS = ("langgraph.graph", "langgraph.checkpoint.sqlite.aio", "aiosqlite")


class AgentState(TypedDict):
    """LangGraph's state: the conversation, each node's messages appended to it."""

    messages: Annotated[list[dict[str, Any]], operator.add]


async def case_langgraph(res: CaseResult, root: Path) -> None:
    graph_mod: Any = importlib.import_module("langgraph.graph")
    saver_mod: Any = importlib.import_module("langgraph.checkpoint.sqlite.aio")
    res.notes.append(f"langgraph {importlib.metadata.version('langgraph')}")
    model = SlowModel(res.latency_ms / 1000)
    tool_calls = 0

    async def model_node(state: dict[str, Any]) -> dict[str, Any]:
        reply = await model(system=None, messages=list(state["messages"]), tools=[])
        return {"messages": [reply.as_message()]}

    async def tools_node(state: dict[str, Any]) -> dict[str, Any]:
        nonlocal tool_calls
        results = []
        for use in tool_uses(state["messages"][-1]):
            results.append((use["id"], await trivial_tool(**use["input"])))
            tool_calls += 1
        return {"messages": [tool_result_message(results)]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if tool_uses(state["messages"][-1]) else str(graph_mod.END)

    builder = graph_mod.StateGraph(AgentState)
    builder.add_node("model", model_node)
    builder.add_node("tools", tools_node)
    builder.add_edge(graph_mod.START, "model")
    builder.add_conditional_edges("model", route, ["tools", graph_mod.END])
    builder.add_edge("tools", "model")
    sampler = Sampler()
    async with saver_mod.AsyncSqliteSaver.from_conn_string(str(root / "lg.db")) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA synchronous") as cur:
            row = await cur.fetchone()
        res.notes.append(f"PRAGMA synchronous = {row[0]} (2 = FULL)")
        graph = builder.compile(checkpointer=saver)
        res.baseline_rss, res.baseline_fds = settle()
        finished = 0

        async def one(i: int) -> None:
            nonlocal finished
            config = {"configurable": {"thread_id": f"run-{i:05d}"}, "recursion_limit": 50}
            start = {"messages": [{"role": "user", "content": f"job {i}"}]}
            await graph.ainvoke(start, config, durability="sync")
            finished += 1

        res.wall_s = await timed_fan_out(res.runs, one, sampler)
    res.completed = finished
    res.steps = model.calls + tool_calls
    res.take(sampler)


def run(res: CaseResult, root: Path) -> None:
    anyio.run(case_langgraph, res, root)
