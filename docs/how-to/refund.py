"""A refund agent that waits on the world: ``python refund.py ORDER``.

It asks a researcher agent (a child run) how long a refund takes, refunds the order, looks at
the refund again a second later (a durable sleep), emails the customer, and waits for their
reply (an event, delivered with ``tether signal``). ``build`` is for ``tether worker``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

import tether
from tether.supervisor import WorkerApp

tools = tether.ToolRegistry()


# --8<-- [start:waits]
@tools.tool(policy="rerun")
async def check_refund_later(order: str) -> tether.Wait:
    """Look at the refund again once the bank has had a moment."""
    return tether.sleep_for(1, result=f"refund of {order} settled")  # or sleep_until(t)


@tools.tool(policy="rerun")
async def await_customer_reply(order: str) -> tether.Wait:
    """Wait for the customer's reply, at most a day."""
    return tether.wait_for(f"reply.{order}", timeout=86400, on_timeout="error")


@tools.tool(policy="rerun")
async def ask_researcher(question: str) -> tether.Wait:
    """Ask the research agent and wait for its report."""
    return tether.start_child(f"research: {question}", budgets=tether.Budgets(max_model_calls=5))


# --8<-- [end:waits]


@tools.tool(policy="rerun")
async def lookup_policy(topic: str) -> str:
    """Look a policy up."""
    return "five working days"


@tools.tool(policy="idempotency_key")
async def issue_refund(order: str, ctx: tether.ToolContext) -> dict[str, str]:
    """Refund an order in full."""
    print(f"payments: refunded {order} (key {ctx.idempotency_key})", flush=True)
    return {"refund": order}


@tools.tool(policy="idempotency_key")
async def email_customer(order: str, text: str, ctx: tether.ToolContext) -> dict[str, str]:
    """Email the customer about an order."""
    print(f"email about {order}: {text}", flush=True)
    return {"sent": order}


def answer(messages: list[tether.Message]) -> Any:
    """The model of both agents, scripted: the lead's turns, or the researcher's two."""
    use = tether.ScriptedModel.tool_use
    turn = sum(1 for m in messages if m["role"] == "assistant")
    last = tether.models.blocks_of(messages[-1])[0].get("content") if turn else None
    if str(messages[0]["content"]).startswith("research:"):
        if turn == 0:
            return [use("toolu_r1", "lookup_policy", {"topic": "refunds"})]
        return f"Card refunds take {last}."
    order = str(messages[0]["content"]).split()[-1]
    steps: list[tuple[str, dict[str, Any]]] = [
        ("ask_researcher", {"question": "How long does a card refund take?"}),
        ("issue_refund", {"order": order}),
        ("check_refund_later", {"order": order}),
        ("email_customer", {"order": order, "text": "Your refund is on its way."}),
        ("await_customer_reply", {"order": order}),
    ]
    if turn < len(steps):
        name, args = steps[turn]
        return [use(f"toolu_{turn + 1}", name, args)]
    said = json.loads(last)["text"] if isinstance(last, str) and last.startswith("{") else last
    return f"Refunded {order}; the customer said: {said}"


def build() -> WorkerApp:
    """What ``tether worker --app refund:build`` serves."""
    return WorkerApp(model=tether.ScriptedModel(answer), tools=tools)


async def main(order: str) -> None:
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=tether.ScriptedModel(answer), tools=tools) as sup:
        if not await store.exists(order):
            await sup.start(order, f"Refund order {order}")
        shown = None
        while True:  # until the run ends, or waits for something only the world can send
            await sup.wait(order)
            view = await sup.inspect(order)  # one read: its status and reason agree
            if not view.status.resting:
                continue  # it woke between the two looks
            reason = view.final_text or view.reason
            if (view.status, reason) != shown:
                print(f"{order}: {view.status.value} {reason}", flush=True)
                shown = (view.status, reason)
            if view.status is not tether.RunStatus.SLEEPING or "waiting for event" in reason:
                break
            await anyio.sleep(0.1)  # a sleep or a child run: the supervisor wakes it


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
