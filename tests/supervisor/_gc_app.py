"""A worker application whose one tool reports the process's garbage-collector settings."""

from __future__ import annotations

import gc
from typing import Any

import tether
from tether.supervisor import WorkerApp

tools = tether.ToolRegistry()


@tools.tool(policy="rerun")
async def collector() -> dict[str, Any]:
    """Say how the cyclic garbage collector is set in this process."""
    return {"threshold": list(gc.get_threshold()), "frozen": gc.get_freeze_count()}


def make_model() -> tether.ScriptedModel:
    return tether.ScriptedModel([[tether.ScriptedModel.tool_use("t1", "collector")], "done"])


def app() -> WorkerApp:
    return WorkerApp(model=make_model(), tools=tools)
