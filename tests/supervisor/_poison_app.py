"""A worker application with one poisoned run: its tool kills its own process every time.

Run ``poison`` calls ``explode`` (a read, so safe to repeat: a segfaulting library, an
out-of-memory on one ticket), which ends the process with ``SIGKILL``. Every other run looks
its item up and delivers it to the ledger of ``_ledger_app`` (``$TETHER_TEST_LEDGER``).
"""

from __future__ import annotations

import os
import signal

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import WorkerApp

from . import _ledger_app

tools = tether.ToolRegistry()
tools.register(_ledger_app.lookup, policy="rerun")
tools.register(_ledger_app.deliver, policy="idempotency_key")


@tools.tool(policy="rerun")
async def explode(ticket: str) -> str:
    """Parse a ticket (with a library that crashes the process on this one)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def script(messages: list[Message]) -> list[ContentBlock] | str:
    item = str(messages[0]["content"])
    if item == "poison":
        return [tether.ScriptedModel.tool_use("toolu_boom", "explode", {"ticket": "T-1"})]
    return _ledger_app.script(messages)


def make_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script)


def app() -> WorkerApp:
    return WorkerApp(
        model=make_model(),
        tools=tools,
        options={"sweep_interval": 0.2, "restart_backoff": 0.01},
    )
