"""Two deploys of one application for the parked-run tests: ``v1`` as the runs started, and
``v2``, whose ``lookup`` gained a parameter under the same version (a contract change)."""

from __future__ import annotations

from typing import Any

import tether
from tether.models import Message
from tether.supervisor import WorkerApp

use = tether.ScriptedModel.tool_use


def script(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    return [[use("toolu_1", "lookup", {"q": "refund policy"})], "five days"][min(step, 1)]


def model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script)


def tools_v1() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", approval=True)
    async def lookup(q: str) -> str:
        """Look something up."""
        return "refunds take five days"

    return tools


def tools_v2() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", approval=True)
    async def lookup(q: str, limit: int = 3) -> str:
        """Look something up."""
        return "refunds take five days"

    return tools


def v1() -> WorkerApp:
    return WorkerApp(model=model(), tools=tools_v1(), options={"sweep_interval": 0.2})


def v2() -> WorkerApp:
    return WorkerApp(model=model(), tools=tools_v2(), options={"sweep_interval": 0.2})
