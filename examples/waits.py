"""A refund agent that waits on the world: a durable sleep, a child run and an external event.

The lead run handles a refund for order o-1 in six turns, one tool per turn:

=========================  ====================================================================
tool                       what it does
=========================  ====================================================================
``issue_refund``           refunds the order (``idempotency_key``: the payments service
                           deduplicates by key)
``check_refund_later``     ``tether.sleep_for(0.5)``: the run parks, and wakes when the time
                           comes, in whichever process serves the store then
``ask_researcher``         ``tether.start_child(...)``: a researcher agent runs as a child run
                           (it looks the policy up, then answers); its answer is the result
``send_reply``             emails the customer (``idempotency_key``)
``await_customer_reply``   ``tether.wait_for("reply.o-1", timeout=30)``: the run parks until
                           the customer's reply arrives as a signal
=========================  ====================================================================

The services keep one JSON line per effect in ``effects.jsonl`` under the scenario's root; the
ledger counts them, so a refund or an email sent twice shows up as a duplicate. The scenario's
``deliver`` is the customer: it answers the wait for ``reply.o-1``, between two processes, as
a webhook calling ``tether signal`` would.

    tether crashtest examples.waits:scenario
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import tether
from tether.journal import Signal
from tether.models import Message, Model, ScriptedModel, blocks_of
from tether.testing import Awaited, Scenario
from tether.tools import ToolContext, ToolRegistry

RUN_ID = "run-refund-o1"
PROMPT = "Order o-1 arrived broken: refund it, tell the customer how long it takes, and close."
REPLY = "Thanks, that is all I needed."


class Services:
    """Payments and email: one JSON line per effect, deduplicated by the request's key.

    Each call reads the file again, so a killed process keeps nothing of it in memory.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _lines(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def do(self, kind: str, subject: str, key: str) -> dict[str, Any]:
        """Do ``kind`` for ``subject`` once per ``key``; a key seen before gets the first
        result back."""
        for line in self._lines():
            if line["key"] == key:
                return dict(line["result"])
        done = sum(1 for line in self._lines() if line["kind"] == kind)
        result = {"id": f"{kind}-{done + 1}", "subject": subject}
        entry = json.dumps({"kind": kind, "subject": subject, "key": key, "result": result})
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (entry + "\n").encode())  # one small write: the line is whole or absent
            os.fsync(fd)
        finally:
            os.close(fd)
        return result

    def effects(self) -> Counter[str]:
        """What really happened: ``"refund o-1"`` and so on, one count per line."""
        return Counter(f"{line['kind']} {line['subject']}" for line in self._lines())


def _last_result(messages: list[Message]) -> Any:
    block = blocks_of(messages[-1])[0]
    return block.get("content")


def answer(messages: list[Message]) -> Any:
    """The model of both agents: the lead's six turns, or the researcher's two."""
    use = ScriptedModel.tool_use
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if str(messages[0]["content"]).startswith("research:"):
        if turn == 0:
            return [use("toolu_r1", "lookup_policy", {"topic": "refunds"})]
        return f"Refunds reach the card in {_last_result(messages)}."
    steps: list[tuple[str, dict[str, Any]]] = [
        ("issue_refund", {"order": "o-1"}),
        ("check_refund_later", {"order": "o-1"}),
        ("ask_researcher", {"question": "How long does a card refund take?"}),
        ("send_reply", {"order": "o-1", "text": "Your refund is on its way."}),
        ("await_customer_reply", {"order": "o-1"}),
    ]
    if turn < len(steps):
        name, args = steps[turn]
        return [use(f"toolu_{turn + 1}", name, args)]
    reply = _last_result(messages)
    said = reply.get("text") if isinstance(reply, dict) else reply
    return f"Refunded o-1; the customer replied: {said}"


# --8<-- [start:deliver]
def deliver(awaited: Awaited) -> Signal | None:
    """The customer answers the email."""
    if awaited.event == "reply.o-1":
        return awaited.deliver({"text": REPLY}, by="customer")
    return None


# --8<-- [end:deliver]


def scenario(root: Path) -> Scenario:
    """Refund o-1, sleep, ask a researcher, email the customer and wait for the reply."""
    services = Services(root / "effects.jsonl")

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="idempotency_key")
        async def issue_refund(order: str, ctx: ToolContext) -> Any:
            """Refund an order in full."""
            return services.do("refund", order, ctx.idempotency_key)

        @tools.tool(policy="rerun")
        async def check_refund_later(order: str) -> tether.Wait:
            """Look at the refund again once the bank has had a moment."""
            return tether.sleep_for(0.5, result=f"refund of {order} settled")

        @tools.tool(policy="rerun")
        async def ask_researcher(question: str) -> tether.Wait:
            """Ask the research agent and wait for its report."""
            return tether.start_child(f"research: {question}")

        @tools.tool(policy="rerun")
        async def lookup_policy(topic: str) -> str:
            """Look a policy up (a read)."""
            return "five working days"

        @tools.tool(policy="idempotency_key")
        async def send_reply(order: str, text: str, ctx: ToolContext) -> Any:
            """Email the customer about an order."""
            return services.do("email", order, ctx.idempotency_key)

        @tools.tool(policy="rerun")
        async def await_customer_reply(order: str) -> tether.Wait:
            """Wait for the customer's reply (at most 30 s here)."""
            return tether.wait_for(f"reply.{order}", timeout=30)

        return ScriptedModel(answer), tools

    return Scenario(
        build=build,
        prompt=PROMPT,
        ledger=services.effects,
        run_id=RUN_ID,
        deliver=deliver,
    )
