"""An Agents SDK support desk, written the SDK's way, as a tether run and a crash-test scenario.

A triage agent with an input guardrail hands off to a refunds agent, which looks two orders up
at once (``lookup_order``) and refunds both at once (``refund``, ``needs_approval=True``: a
person approves each), then answers. The agents speak through the SDK's own
``OpenAIResponsesModel`` and the real ``openai`` SDK to the test suite's strict fake of the
Responses API (``tests/models/_responses_api.py``), which checks every request as the API does
and answers from the request alone, so a resumed process gets the same answer. Every request
it really gets is logged to ``requests.log`` under the scenario's root.

``TetherRunner`` makes the runs tether runs; the options say what the SDK does not:
``lookup_order`` is safe to run again, ``refund`` is deduplicated by tether's idempotency key.

    tether crashtest examples.openai_agents_app:scenario

Run it from a checkout of tether (the fake lives in its tests) with the ``openai-agents`` extra.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import httpx2
import openai
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OpenAIResponsesModel,
    RunConfig,
    RunContextWrapper,
    function_tool,
    input_guardrail,
)

from examples.pydantic_ai_agent import ORDERS, PROMPT, Billing
from tests.models._responses_api import Answer, ResponsesAPI, answer, function_call
from tether.integrations.openai_agents import TetherRunner, idempotency_key
from tether.testing import Scenario


def respond(body: dict[str, Any]) -> Answer:
    """The model's answer, chosen from the request alone (so every process agrees)."""
    tools = {t.get("name") for t in body.get("tools", [])}
    items = body["input"] if isinstance(body["input"], list) else []
    texts = [i["output"] for i in items if i.get("type") == "function_call_output"]
    refused = [t for t in texts if not t.startswith("{")]
    # tether sends a tool's dict as JSON; the SDK alone sends its repr
    outputs = [_parsed(t) for t in texts if t.startswith("{")]
    if "transfer_to_refunds" in tools:
        return answer(function_call("call_handoff", "transfer_to_refunds", {}))
    looked_up = {o["order"]: o["total"] for o in outputs if "total" in o}
    refunded = sorted(o["order"] for o in outputs if "refunded" in o)
    if refused:
        return answer(f"Nothing refunded: {refused[0]}")
    if not looked_up:
        return answer(
            "Looking both orders up.",
            function_call("call_lookup_1", "lookup_order", {"order": "A-1"}),
            function_call("call_lookup_2", "lookup_order", {"order": "A-2"}),
        )
    if not refunded:
        return answer(
            *(
                function_call(f"call_refund_{n}", "refund", {"order": o, "amount": t})
                for n, (o, t) in enumerate(sorted(looked_up.items()), 1)
            )
        )
    return answer(f"Refunded {' and '.join(refunded)} in full.")


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return ast.literal_eval(text)


@function_tool
async def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up: its total."""
    return {"order": order, "total": ORDERS[order]}


@function_tool(needs_approval=True)
async def refund(ctx: RunContextWrapper[Billing], order: str, amount: float) -> dict[str, Any]:
    """Refund an order (a person approves)."""
    return ctx.context.refund(order, amount, key=idempotency_key())


@input_guardrail
async def no_chargebacks(
    ctx: RunContextWrapper[Billing], agent: Agent[Billing], given: Any
) -> GuardrailFunctionOutput:
    """Chargebacks go to a person, not to the agents."""
    return GuardrailFunctionOutput(
        output_info={"chargeback": "chargeback" in str(given).lower()},
        tripwire_triggered="chargeback" in str(given).lower(),
    )


def build_agents(model: OpenAIResponsesModel) -> Agent[Billing]:
    refunds = Agent[Billing](
        name="refunds",
        instructions="You are Kitebase billing. Refund returned orders in full.",
        model=model,
        tools=[lookup_order, refund],
    )
    return Agent[Billing](
        name="triage",
        instructions="Send refund requests to the refunds agent.",
        model=model,
        handoffs=[refunds],
        input_guardrails=[no_chargebacks],
    )


def durable_runner(root: Path) -> TetherRunner:
    """The support desk on tether, its model a fake logging each real request under ``root``."""
    log = root / "requests.log"

    def logged(body: dict[str, Any]) -> Answer:
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"items": len(body["input"])}) + "\n")
        return respond(body)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(ResponsesAPI(respond=logged)))
    client = openai.AsyncOpenAI(api_key="fake", http_client=http, max_retries=0)
    model = OpenAIResponsesModel(model="gpt-5-mini", openai_client=client)
    return TetherRunner(
        build_agents(model),
        context=Billing(root / "payments.jsonl"),
        run_config=RunConfig(tracing_disabled=True),
        tools={"lookup_order": {"policy": "rerun"}, "refund": {"policy": "idempotency_key"}},
    )


def scenario(root: Path) -> Scenario:
    payments = root / "payments.jsonl"

    def build() -> tuple[Any, Any]:
        runner = durable_runner(root)
        return runner.model, runner.tools

    def ledger() -> list[str]:
        if not payments.exists():
            return []
        lines = payments.read_text(encoding="utf-8").splitlines()
        return [f"refund {json.loads(line)['order']}" for line in lines]

    return Scenario(run_id="run-desk", prompt=PROMPT, build=build, ledger=ledger)
