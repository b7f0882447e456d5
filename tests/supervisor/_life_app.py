"""A worker application for lifetime tests: one long run of many steps, each a side effect.

Every step calls ``act`` (``idempotency_key``), which takes a while and writes its step to the
ledger at ``$TETHER_TEST_LEDGER`` at most once per key, logging every attempt to
``<ledger>.attempts`` and every start to ``<ledger>.starts`` (``pid step``), so a test can kill
a worker in the middle of a step and count what really happened. ``notify`` (``escalate``,
the default policy) takes ``$TETHER_TEST_NOTIFY_S`` seconds: a call that cannot be repeated
safely, for drain tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
from typing import Any

import anyio

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import WorkerApp

STEPS = 40

tools = tether.ToolRegistry()


@tools.tool(policy="idempotency_key")
async def act(step: int, ctx: tether.ToolContext) -> dict[str, Any]:
    """Carry out one step of the plan."""
    _log(".starts", f"{os.getpid()} {step}")
    await anyio.sleep(random.uniform(0.1, 0.3))
    return await anyio.to_thread.run_sync(_record, ctx.idempotency_key, step)


@tools.tool  # escalate: running it twice would notify the customer twice
async def notify(customer: str, ctx: tether.ToolContext) -> str:
    """Notify a customer."""
    _log(".starts", f"{os.getpid()} notify")
    await anyio.sleep(float(os.environ.get("TETHER_TEST_NOTIFY_S", "2")))
    await anyio.to_thread.run_sync(_record, ctx.idempotency_key, -1)
    return f"notified {customer}"


def _log(suffix: str, line: str) -> None:
    with open(os.environ["TETHER_TEST_LEDGER"] + suffix, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _record(key: str, step: int) -> dict[str, Any]:
    path = os.environ["TETHER_TEST_LEDGER"]
    with open(path, "a+", encoding="utf-8") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        _log(".attempts", key)
        ledger.seek(0)
        keys = [json.loads(line)["key"] for line in ledger if line.strip()]
        if key not in keys:
            ledger.write(json.dumps({"key": key, "step": step}) + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return {"step": step, "duplicate": key in keys}


def script(messages: list[Message]) -> list[ContentBlock] | str:
    step = sum(1 for m in messages if m["role"] == "assistant")
    if messages[0]["content"] == "notify":
        if step == 0:
            return [tether.ScriptedModel.tool_use("toolu_n", "notify", {"customer": "dana"})]
        return "customer notified"
    if step < STEPS:
        return [tether.ScriptedModel.tool_use(f"toolu_{step}", "act", {"step": step})]
    return f"all {STEPS} steps done"


def make_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script)


def app() -> WorkerApp:
    return WorkerApp(
        model=make_model(),
        tools=tools,
        options={"sweep_interval": 0.2, "restart_backoff": 0.01, "drain_timeout": 10.0},
    )
