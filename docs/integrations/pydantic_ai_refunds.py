"""A pydantic-ai refund agent on tether: ``python pydantic_ai_refunds.py RUN_ID``.

The agent is a plain ``pydantic_ai.Agent``: a billing service as its dependency, a tool that
reads (``lookup_order``) and one that pays, which a person approves first
(``requires_approval=True``). Its model is pydantic-ai's own offline ``FunctionModel``, which
answers from the messages alone: look both orders up, refund both, say so. With a real model
(``Agent("openai:gpt-5-mini", ...)``) nothing else changes.

The first call starts the run, which parks for the refunds' approval. Approve them with
``tether approve`` and call it again, or let it approve them in code (``--approve-as NAME``).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import tether
from tether.integrations.pydantic_ai import TetherAgent

ORDERS = {"A-1": 30.0, "A-2": 45.5}


class Billing:
    """Stands in for your payment service (a real one refunds once per idempotency key)."""

    def refund(self, order: str, amount: float, key: str) -> dict[str, Any]:
        print(f"payments: refunded {amount} for {order} (key {key})", flush=True)
        return {"order": order, "refunded": amount}


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model, offline: its answer chosen from the messages alone."""
    returns = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    results: list[dict[str, Any]] = [dict(r) for r in returns if isinstance(r, dict)]
    totals = {r["order"]: r["total"] for r in results if "total" in r}
    refunded = sorted(r["order"] for r in results if "refunded" in r)
    refused = [r for r in returns if isinstance(r, str)]  # a rejection's note
    if refused:
        return ModelResponse(parts=[TextPart(f"Nothing refunded: {refused[0]}")])
    if not totals:
        return ModelResponse(
            parts=[
                ToolCallPart("lookup_order", {"order": o}, tool_call_id=f"look_{o}") for o in ORDERS
            ]
        )
    if not refunded:
        return ModelResponse(
            parts=[
                ToolCallPart("refund", {"order": o, "amount": t}, tool_call_id=f"refund_{o}")
                for o, t in sorted(totals.items())
            ]
        )
    return ModelResponse(parts=[TextPart(f"Refunded {' and '.join(refunded)} in full.")])


# --8<-- [start:agent]
agent = Agent(
    FunctionModel(respond),  # or "openai:gpt-5-mini", ...
    deps_type=Billing,
    instructions="You are Kitebase billing. Refund returned orders in full.",
)


@agent.tool_plain
async def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up: its total."""
    return {"order": order, "total": ORDERS[order]}


@agent.tool(requires_approval=True)
async def refund(ctx: RunContext[Billing], order: str, amount: float) -> dict[str, Any]:
    """Refund an order (a person approves first)."""
    return ctx.deps.refund(order, amount, key=f"{ctx.run_id}:{ctx.tool_call_id}")


durable = TetherAgent(
    agent,
    deps=Billing(),  # the same in every process
    tools={"lookup_order": {"policy": "rerun"}, "refund": {"policy": "idempotency_key"}},
)
# --8<-- [end:agent]


# --8<-- [start:main]
async def main(run_id: str, approver: str | None) -> None:
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=durable.model, tools=durable.tools) as sup:
        try:
            if not await store.exists(run_id):
                # an AgentRunResult if the run ends on its own; this one parks for a person
                result = await durable.run(sup, run_id, "Refund orders A-1 and A-2.")
            else:
                if approver is not None:  # in code, what `tether approve` does
                    for call_id in (await sup.inspect(run_id)).pending:
                        await sup.decide(run_id, call_id, approved=True, by=approver)
                await sup.wait(run_id)  # the run goes on once its calls are decided
                result = await durable.result(sup, run_id)
        except tether.RunStateError as parked:  # not done: what it waits for
            print(parked)
            return
        print(f"{run_id}: {result.output}")


# --8<-- [end:main]


if __name__ == "__main__":
    approver = sys.argv[3] if sys.argv[2:3] == ["--approve-as"] else None
    anyio.run(main, sys.argv[1], approver)
