"""An Agents SDK support desk on tether: ``python agents_refunds.py RUN_ID [--approve-as NAME]``.

A triage agent with an input guardrail hands off to a refunds agent, which looks two orders up
(``lookup_order``) and refunds both (``refund``, ``needs_approval=True``: a person approves
first), then answers. Their model is an offline ``agents.Model`` of its own, which answers from
the request alone; with a real one (``model="gpt-5-mini"`` and ``OPENAI_API_KEY``) nothing
else changes.

The first call starts the run, which parks for the refunds' approval. Approve them with
``tether approve`` and call it again, or let it approve them in code (``--approve-as NAME``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from agents import (
    Agent,
    AgentOutputSchemaBase,
    GuardrailFunctionOutput,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    RunContextWrapper,
    Tool,
    TResponseInputItem,
    Usage,
    function_tool,
    input_guardrail,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponsePromptParam,
)

import tether
from tether.integrations.openai_agents import TetherRunner, idempotency_key

ORDERS = {"A-1": 30.0, "A-2": 45.5}


class Billing:
    """Stands in for your payment service (a real one refunds once per idempotency key)."""

    def refund(self, order: str, amount: float, key: str) -> dict[str, Any]:
        print(f"payments: refunded {amount} for {order} (key {key})", flush=True)
        return {"order": order, "refunded": amount}


class Offline(Model):
    """The agents' model, offline: its answer chosen from the request alone."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        if handoffs:  # the triage agent
            return _answer(_call("transfer", handoffs[0].tool_name, {}))
        items: list[Any] = [] if isinstance(input, str) else list(input)
        texts = [str(i["output"]) for i in items if i.get("type") == "function_call_output"]
        results = [json.loads(t) for t in texts if t.startswith("{")]
        totals = {r["order"]: r["total"] for r in results if "total" in r}
        refunded = sorted(r["order"] for r in results if "refunded" in r)
        refused = [t for t in texts if not t.startswith("{")]  # a rejection's note
        if refused:
            return _answer(f"Nothing refunded: {refused[0]}")
        if not totals:
            return _answer(*(_call(f"look_{o}", "lookup_order", {"order": o}) for o in ORDERS))
        if not refunded:
            return _answer(
                *(
                    _call(f"refund_{o}", "refund", {"order": o, "amount": t})
                    for o, t in sorted(totals.items())
                )
            )
        return _answer(f"Refunded {' and '.join(refunded)} in full.")

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this model does not stream")
        yield  # an async generator, as the SDK expects


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments)
    )


def _answer(*output: str | ResponseFunctionToolCall) -> ModelResponse:
    items = [
        ResponseOutputMessage(
            id="msg",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=item, annotations=[])],
        )
        if isinstance(item, str)
        else item
        for item in output
    ]
    return ModelResponse(output=list(items), usage=Usage(), response_id=None)


# --8<-- [start:agents]
@function_tool
async def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up: its total."""
    return {"order": order, "total": ORDERS[order]}


@function_tool(needs_approval=True)
async def refund(ctx: RunContextWrapper[Billing], order: str, amount: float) -> dict[str, Any]:
    """Refund an order (a person approves first)."""
    return ctx.context.refund(order, amount, key=idempotency_key())


@input_guardrail
async def no_chargebacks(
    ctx: RunContextWrapper[Billing], agent: Agent[Billing], given: Any
) -> GuardrailFunctionOutput:
    """Chargebacks go to a person, not to the agents."""
    chargeback = "chargeback" in str(given).lower()
    return GuardrailFunctionOutput(output_info=chargeback, tripwire_triggered=chargeback)


model = Offline()  # or "gpt-5-mini", ...
refunds = Agent[Billing](
    name="refunds",
    instructions="Refund returned orders.",
    model=model,
    tools=[lookup_order, refund],
)
triage = Agent[Billing](
    name="triage",
    instructions="Send refunds on.",
    model=model,
    handoffs=[refunds],
    input_guardrails=[no_chargebacks],
)

runner = TetherRunner(
    triage,
    context=Billing(),  # the same in every process
    run_config=RunConfig(tracing_disabled=True),
    tools={"lookup_order": {"policy": "rerun"}, "refund": {"policy": "idempotency_key"}},
)
# --8<-- [end:agents]


# --8<-- [start:main]
async def main(run_id: str, approver: str | None) -> None:
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=runner.model, tools=runner.tools) as sup:
        try:
            if not await store.exists(run_id):
                # a RunResult if the run ends on its own; this one parks for a person
                result = await runner.run(
                    triage, "Refund orders A-1 and A-2.", supervisor=sup, run_id=run_id
                )
            else:
                if approver is not None:  # in code, what `tether approve` does
                    for call_id in (await sup.inspect(run_id)).pending:
                        await sup.decide(run_id, call_id, approved=True, by=approver)
                await sup.wait(run_id)  # the run goes on once its calls are decided
                result = await runner.result(sup, run_id)
        except tether.RunStateError as parked:  # not done: what it waits for
            print(parked)
            return
        print(f"{run_id}: {result.final_output}")


# --8<-- [end:main]


if __name__ == "__main__":
    approver = sys.argv[3] if sys.argv[2:3] == ["--approve-as"] else None
    anyio.run(main, sys.argv[1], approver)
