"""A worker application whose runs never rest: every answer asks for another ``send``.

Each ``send`` is a side effect (an escalate-policy tool: its outcome is unknown after a crash)
that appends a line to ``$TETHER_TEST_LEDGER`` (``time key``) as it starts, then takes
``$TETHER_TEST_STEP`` seconds (0.2 by default). A prompt starting with ``lead`` first asks a
helper, a child run of the same kind, and waits for it.
"""

from __future__ import annotations

import os
import time

import anyio

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import WorkerApp

tools = tether.ToolRegistry()
use = tether.ScriptedModel.tool_use


@tools.tool
async def send(n: int, ctx: tether.ToolContext) -> str:
    """Send message number ``n`` to the customer."""
    with open(os.environ["TETHER_TEST_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"{time.time()!r} {ctx.idempotency_key}\n")
    await anyio.sleep(float(os.environ.get("TETHER_TEST_STEP", "0.2")))
    return f"sent {n}"


@tools.tool(policy="rerun")
async def ask_helper() -> tether.Wait:
    """Hand the rest to a helper agent and wait for it."""
    return tether.start_child("helper: keep sending")


def script(messages: list[Message]) -> list[ContentBlock]:
    step = sum(1 for m in messages if m["role"] == "assistant")
    if str(messages[0]["content"]).startswith("lead") and step == 0:
        return [use("toolu_h", "ask_helper", {})]
    return [use(f"toolu_{step}", "send", {"n": step})]


def make_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script)


def app() -> WorkerApp:
    return WorkerApp(model=make_model(), tools=tools, options={"sweep_interval": 0.2})
