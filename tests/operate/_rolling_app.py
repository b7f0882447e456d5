"""Two deploys of one agent for the rolling-deploy test: ``v1``, and ``v2`` whose ``notify``
gained a required parameter under the same version (runs pinned to v1 cannot go on on v2).
Each ``notify`` writes ``<deploy> <pid> <key>`` to ``$TETHER_TEST_LEDGER``."""

from __future__ import annotations

import os
from typing import Any

import anyio

import tether
from tether.models import Message
from tether.supervisor import WorkerApp

use = tether.ScriptedModel.tool_use


def script(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step < 3:
        return [use(f"toolu_{step}", "step", {"n": step})]
    if step == 3:
        return [use("toolu_n", "notify", {"customer": "c-1"})]
    return "done"


def _tools(deploy: str) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(n: int) -> str:
        """Do step n."""
        await anyio.sleep(0.05)
        return f"step {n} done"

    def note(key: str) -> None:
        with open(os.environ["TETHER_TEST_LEDGER"], "a", encoding="utf-8") as ledger:
            ledger.write(f"{deploy} {os.getpid()} {key}\n")

    async def notify_v1(customer: str, ctx: tether.ToolContext) -> str:
        """Tell the customer."""
        note(ctx.idempotency_key)
        return "told"

    async def notify_v2(customer: str, channel: str, ctx: tether.ToolContext) -> str:
        """Tell the customer on a channel."""
        note(ctx.idempotency_key)
        return "told"

    tools.register(
        notify_v1 if deploy == "v1" else notify_v2, name="notify", policy="idempotency_key"
    )

    return tools


def v1() -> WorkerApp:
    return WorkerApp(
        model=tether.ScriptedModel(script), tools=_tools("v1"), options={"sweep_interval": 0.2}
    )


def v2() -> WorkerApp:
    return WorkerApp(
        model=tether.ScriptedModel(script), tools=_tools("v2"), options={"sweep_interval": 0.2}
    )
