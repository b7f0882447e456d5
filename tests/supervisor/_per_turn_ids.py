"""A crash-test scenario whose model numbers its calls per turn: ``call_0`` every turn.

Two refunds (``idempotency_key``) go to a payment service under the scenario's root that
deduplicates by key, as a real one would. If both calls kept the id ``call_0`` they would
share one key and the second refund would be dropped.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

import tether
from tether.testing import Scenario

use = tether.ScriptedModel.tool_use
SCRIPT: list[Any] = [
    [use("call_0", "refund", {"order": "o-1"})],
    [use("call_0", "refund", {"order": "o-2"})],
    "both orders refunded",
]


def _refund(path: Path, order: str, key: str) -> dict[str, object]:
    with path.open("a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        seen = {json.loads(line)["key"]: json.loads(line)["order"] for line in f if line.strip()}
        if key in seen:
            return {"order": seen[key], "duplicate": True}
        f.write(json.dumps({"key": key, "order": order}) + "\n")
        return {"order": order, "duplicate": False}


def scenario(root: Path) -> Scenario:
    payments = root / "payments.jsonl"

    def build() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
        tools = tether.ToolRegistry()

        @tools.tool(policy="idempotency_key")
        async def refund(order: str, ctx: tether.ToolContext) -> dict[str, object]:
            """Refund an order."""
            return _refund(payments, order, ctx.idempotency_key)

        return tether.ScriptedModel(SCRIPT), tools

    def ledger() -> list[str]:
        if not payments.exists():
            return []
        return [f"refund {json.loads(line)['order']}" for line in payments.read_text().splitlines()]

    return Scenario(run_id="run-ids", prompt="refund both orders", build=build, ledger=ledger)
