"""A worker application for the lost-lease test: one call to an escalate-policy tool whose
effect comes ``$TETHER_TEST_CALL`` seconds after it starts.

The outside world is ``$TETHER_TEST_LEDGER``: a line ``start PID KEY`` when the call starts
and ``effect PID KEY`` when its effect happens, so a test can tell whose call had its effect.
"""

from __future__ import annotations

import os
from typing import Any

import anyio

import tether
from tether.models import Message
from tether.supervisor import WorkerApp

tools = tether.ToolRegistry()
use = tether.ScriptedModel.tool_use


def _note(what: str, key: str) -> None:
    with open(os.environ["TETHER_TEST_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"{what} {os.getpid()} {key}\n")


@tools.tool  # escalate: a call whose outcome is unknown is a person's to answer
async def notify(customer: str, ctx: tether.ToolContext) -> str:
    """Tell the customer their refund was sent."""
    _note("start", ctx.idempotency_key)
    await anyio.sleep(float(os.environ.get("TETHER_TEST_CALL", "3")))
    _note("effect", ctx.idempotency_key)
    return f"told {customer}"


def script(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    return [[use("toolu_n", "notify", {"customer": "c-1"})], "done"][min(step, 1)]


def app() -> WorkerApp:
    return WorkerApp(
        model=tether.ScriptedModel(script),
        tools=tools,
        options={"sweep_interval": 0.1, "restart_backoff": 0.01},
    )
