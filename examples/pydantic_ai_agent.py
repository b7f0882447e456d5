"""A pydantic-ai refund agent, written pydantic-ai's way, as a tether run and a crash-test scenario.

The agent is a plain ``pydantic_ai.Agent`` with a dependency (the billing service), a tool that
reads (``lookup_order``) and one that pays and needs a person's approval
(``requires_approval=True``). Its model is pydantic-ai's own offline ``FunctionModel``, whose
answers are chosen from the messages alone (so every process agrees): look both orders up at
once, refund both at once, then say so. ``TetherAgent`` makes its runs tether runs; the
options say what tether needs to know and pydantic-ai does not: ``lookup_order`` is safe to
run again, ``refund`` is deduplicated by its idempotency key (``ctx.run_id`` and
``ctx.tool_call_id``, the same in every process).

Every request the model really gets is logged to ``requests.log`` under the scenario's root,
so a test can tell a request asked again from one the journal answered.

    tether crashtest examples.pydantic_ai_agent:scenario
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tether.integrations.pydantic_ai import TetherAgent
from tether.testing import Scenario

ORDERS = {"A-1": 30.0, "A-2": 45.5}
Respond = Callable[[list[ModelMessage], AgentInfo], ModelResponse]
PROMPT = "Customer jo@example.com returned orders A-1 and A-2. Refund both."


@dataclass
class Billing:
    """The payment service: one refund per idempotency key, whoever asks how often."""

    payments: Path

    def refund(self, order: str, amount: float, key: str) -> dict[str, Any]:
        with self.payments.open("a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            seen = {json.loads(line)["key"] for line in f if line.strip()}
            if key in seen:
                return {"order": order, "refunded": amount, "duplicate": True}
            f.write(json.dumps({"key": key, "order": order, "amount": amount}) + "\n")
            return {"order": order, "refunded": amount, "duplicate": False}


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: its answer chosen from the messages alone."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    values: list[dict[str, Any]] = [dict(r.content) for r in returns if isinstance(r.content, dict)]
    looked_up = {v["order"]: v["total"] for v in values if "total" in v}
    refunded = [v["order"] for v in values if "refunded" in v]
    refused = [r.content for r in returns if isinstance(r.content, str)]
    if refused:
        return ModelResponse(parts=[TextPart(f"Nothing refunded: {refused[0]}")])
    if not looked_up:
        return ModelResponse(
            parts=[
                TextPart("Looking both orders up."),
                ToolCallPart("lookup_order", {"order": "A-1"}, tool_call_id="call_0"),
                ToolCallPart("lookup_order", {"order": "A-2"}, tool_call_id="call_1"),
            ]
        )
    if not refunded:
        return ModelResponse(
            parts=[
                ToolCallPart("refund", {"order": o, "amount": t}, tool_call_id=f"call_{i}")
                for i, (o, t) in enumerate(sorted(looked_up.items()))
            ]
        )
    return ModelResponse(parts=[TextPart(f"Refunded {' and '.join(sorted(refunded))} in full.")])


def build_agent(model: FunctionModel) -> Agent[Billing, str]:
    agent = Agent(
        model,
        deps_type=Billing,
        instructions="You are Kitebase billing. Refund returned orders in full.",
        name="refunds",
    )

    @agent.tool_plain
    async def lookup_order(order: str) -> dict[str, Any]:
        """Look an order up: its total."""
        return {"order": order, "total": ORDERS[order]}

    @agent.tool(requires_approval=True)
    async def refund(ctx: RunContext[Billing], order: str, amount: float) -> dict[str, Any]:
        """Refund an order (a person approves)."""
        return ctx.deps.refund(order, amount, key=f"{ctx.run_id}:{ctx.tool_call_id}")

    return agent


def logged_model(root: Path, answer: Respond) -> FunctionModel:
    """A ``FunctionModel`` answering with ``answer``, logging each real request to
    ``root/requests.log``."""
    log = root / "requests.log"

    def logged(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response = answer(messages, info)
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"requests": len(messages)}) + "\n")
        return response

    return FunctionModel(logged)


def durable_agent(root: Path) -> TetherAgent[str]:
    """The agent on tether, its model logging each real request under ``root``."""
    return TetherAgent(
        build_agent(logged_model(root, respond)),
        deps=Billing(root / "payments.jsonl"),
        tools={"lookup_order": {"policy": "rerun"}, "refund": {"policy": "idempotency_key"}},
    )


def scenario(root: Path) -> Scenario:
    payments = root / "payments.jsonl"

    def build() -> tuple[Any, Any]:
        agent = durable_agent(root)
        return agent.model, agent.tools

    def ledger() -> list[str]:
        if not payments.exists():
            return []
        lines = payments.read_text(encoding="utf-8").splitlines()
        return [f"refund {json.loads(line)['order']}" for line in lines]

    return Scenario(run_id="run-refunds", prompt=PROMPT, build=build, ledger=ledger)
