"""A deliberately broken scenario: a tool declared ``idempotency_key`` that ignores the key.

``transfer_funds`` promises the runtime that running it again is safe, but the bank it calls
is never given the key, so a run killed after the transfer and before its result was saved
transfers twice. ``tether crashtest examples.broken:scenario`` reports the duplicate and exits
non-zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from tether.models import Message, Model, ScriptedModel
from tether.testing import Scenario
from tether.tools import ToolContext, ToolRegistry


def script(messages: list[Message]) -> Any:
    if not any(m.get("role") == "assistant" for m in messages):
        args = {"to_account": "GB33-0042", "amount_cents": 10_000}
        return [ScriptedModel.tool_use("toolu_01", "transfer_funds", args)]
    return "Transferred 100.00 to GB33-0042."


def _transfer(bank: Path, to_account: str, amount_cents: int) -> None:
    """The bank: it carries out every request it gets, and keeps one line per transfer."""
    with open(bank, "a", encoding="utf-8") as f:
        f.write(json.dumps({"to": to_account, "amount_cents": amount_cents}) + "\n")


def scenario(root: Path) -> Scenario:
    """One transfer, through a bank that keeps every request in a JSON-lines file."""
    bank = root / "bank.jsonl"

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="idempotency_key")
        async def transfer_funds(to_account: str, amount_cents: int, ctx: ToolContext) -> str:
            """Transfer money to an account."""
            # The bug: ctx.idempotency_key is never sent, so the bank cannot deduplicate.
            await anyio.to_thread.run_sync(_transfer, bank, to_account, amount_cents)
            return "transferred"

        return ScriptedModel(script), tools

    def ledger() -> list[str]:
        if not bank.exists():
            return []
        lines = bank.read_text(encoding="utf-8").splitlines()
        return [f"transfer to {json.loads(line)['to']}" for line in lines if line]

    return Scenario(run_id="run-transfer", prompt="Pay invoice 7.", build=build, ledger=ledger)
