"""A refund agent on ``OpenAIModel`` (Chat Completions) as a crash-test scenario.

The model looks two orders up at once (two calls in one answer), then refunds each (policy
``idempotency_key``, approved by a person), then answers. It speaks through the real ``openai``
SDK to a strict fake of the Chat Completions API, built inside the scenario's ``build``: the
test suite's fake (``tests/models/_chat_api.py``), which checks every request as the API does
and answers from the request alone, so a resumed process gets the same answer. Like many
servers that speak the API, it numbers its calls per turn (``call_0`` every turn): the runtime
renames a reused id before journaling it, so each refund has its own idempotency key and the
payment service, which deduplicates by key, takes both.

    tether crashtest examples.openai_agent:scenario

Run it from a checkout of tether (the fake lives in its tests) with the ``openai`` extra.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

import httpx2
import openai

import tether
from tests.models._chat_api import Answer, ChatAPI, answer, call
from tether.testing import Scenario

ORDERS = {"A-1": 30.0, "A-2": 45.5}
PROMPT = "Customer jo@example.com returned orders A-1 and A-2. Refund both."
SYSTEM = "You are Kitebase billing. Refund returned orders in full."


def respond(body: dict[str, Any]) -> Answer:
    """The model's answer, chosen from the request alone (so every process agrees)."""
    messages = body["messages"]
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        return answer(
            "Looking both orders up.",
            call("call_0", "lookup_order", {"order": "A-1"}),
            call("call_1", "lookup_order", {"order": "A-2"}),
        )
    tool_messages = [m["content"] for m in messages if m["role"] == "tool"]
    results = [json.loads(text) for text in tool_messages if text.startswith("{")]
    found = {r["order"]: r["total"] for r in results if "total" in r}
    if turn in (1, 2):
        order = "A-1" if turn == 1 else "A-2"
        return answer(call("call_0", "refund", {"order": order, "amount": found[order]}))
    return answer("Refunded A-1 and A-2 in full.")


def _pay(path: Path, order: str, amount: float, key: str) -> dict[str, Any]:
    """The payment service: one refund per idempotency key, whoever asks how often."""
    with path.open("a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        seen = {json.loads(line)["key"] for line in f if line.strip()}
        if key in seen:
            return {"order": order, "refunded": amount, "duplicate": True}
        f.write(json.dumps({"key": key, "order": order, "amount": amount}) + "\n")
        return {"order": order, "refunded": amount, "duplicate": False}


def scenario(root: Path) -> Scenario:
    payments = root / "payments.jsonl"

    def build() -> tuple[tether.OpenAIModel, tether.ToolRegistry]:
        api = ChatAPI(respond=respond)
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(api))
        client = openai.AsyncOpenAI(api_key="fake", http_client=http, max_retries=0)
        model = tether.OpenAIModel("gpt-5-mini", client=client, parallel_tool_calls=True)
        tools = tether.ToolRegistry()

        @tools.tool(policy="rerun")
        async def lookup_order(order: str) -> dict[str, Any]:
            """Look an order up: its total."""
            return {"order": order, "total": ORDERS[order]}

        @tools.tool(policy="idempotency_key", approval=True)
        async def refund(order: str, amount: float, ctx: tether.ToolContext) -> dict[str, Any]:
            """Refund an order (a person approves)."""
            return _pay(payments, order, amount, ctx.idempotency_key)

        return model, tools

    def ledger() -> list[str]:
        if not payments.exists():
            return []
        lines = payments.read_text(encoding="utf-8").splitlines()
        return [f"refund {json.loads(line)['order']}" for line in lines]

    return Scenario(run_id="run-refunds", prompt=PROMPT, system=SYSTEM, build=build, ledger=ledger)
