"""A worker application for multi-process tests: a slow read, then a delivery to a ledger.

The ledger (``$TETHER_TEST_LEDGER``, JSON lines) is the outside world: it deduplicates by
idempotency key like a real service would, and records every attempt in ``<ledger>.attempts``
so a test can tell what was really asked of it. With ``$TETHER_TEST_TRACE`` set, every tool
call is also logged there as it starts (``pid wall-time tool key``), and ``$TETHER_TEST_SLOW``
adds that many seconds to each lookup.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import time
from typing import Any

import anyio

import tether
from tether.models import ContentBlock, Message
from tether.supervisor import WorkerApp

tools = tether.ToolRegistry()


@tools.tool(policy="rerun")
async def lookup(item: str) -> str:
    """Look an item up (slow)."""
    _trace("lookup", item)
    await anyio.sleep(random.uniform(0.05, 0.25) + float(os.environ.get("TETHER_TEST_SLOW", 0)))
    return f"{item} is ready"


@tools.tool(policy="idempotency_key")
async def deliver(item: str, ctx: tether.ToolContext) -> dict[str, Any]:
    """Deliver an item, at most once per idempotency key."""
    _trace("deliver", ctx.idempotency_key)
    await anyio.sleep(random.uniform(0.0, 0.05))
    return await anyio.to_thread.run_sync(_deliver, item, ctx.idempotency_key)


def _trace(tool: str, key: str) -> None:
    path = os.environ.get("TETHER_TEST_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as trace:
            trace.write(f"{os.getpid()} {time.time()!r} {tool} {key}\n")


def _deliver(item: str, key: str) -> dict[str, Any]:
    path = os.environ["TETHER_TEST_LEDGER"]
    with open(path, "a+", encoding="utf-8") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        with open(path + ".attempts", "a", encoding="utf-8") as attempts:
            attempts.write(key + "\n")
        ledger.seek(0)
        keys = [json.loads(line)["key"] for line in ledger if line.strip()]
        if key in keys:
            return {"delivered": keys.index(key), "duplicate": True}
        ledger.write(json.dumps({"key": key, "item": item}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
        return {"delivered": len(keys), "duplicate": False}


def script(messages: list[Message]) -> list[ContentBlock] | str:
    step = sum(1 for m in messages if m["role"] == "assistant")
    item = str(messages[0]["content"])
    if step == 0:
        return [tether.ScriptedModel.tool_use("toolu_1", "lookup", {"item": item})]
    if step == 1:
        return [tether.ScriptedModel.tool_use("toolu_2", "deliver", {"item": item})]
    return f"delivered {item}"


def make_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script)


def app() -> WorkerApp:
    return WorkerApp(
        model=make_model(),
        tools=tools,
        options={"sweep_interval": 0.2, "restart_backoff": 0.01, "max_active_runs": 4},
    )
