"""A deploy in the middle of a run: the refund agent's ``refund`` tool gains a parameter.

The agent refunds order o-7 in three turns, one tool per turn:

=====================  ================================================================
tool                   what it does
=====================  ================================================================
``refund``             refunds 20 for the broken item (``idempotency_key``: the payments
                       service deduplicates by key)
``email_customer``     tells the customer (``idempotency_key``); it needs a person's
                       approval, so the run parks, and this is where the deploy happens
``refund``             refunds 5 of shipping, on the contract the run goes by by then
=====================  ================================================================

Version 2 of the application changes ``refund``: it takes a ``reason``, which the payments
service records. The model reads the tool definitions it is shown: it passes a reason only
once the run's contract has one. Two deploys of it, two scenarios:

- ``scenario``: ``reason`` is required, ``refund`` version 2 replaces version 1. The worker
  that resumes the run after the deploy lacks the run's contract and parks it
  (``needs_attention``); the scenario's person accepts the new contract (``tether repin``'s
  record, ``accept_contracts``), and the run finishes on version 2.
- ``compatible``: ``reason`` is optional and the tool says ``compatible=True``: the worker
  takes the change over itself (a ``repinned`` record of its own) and the run goes on.

Under the scenario's root, ``version`` says which application ``build`` makes (the scenario's
``deploy`` writes it), ``effects.jsonl`` holds one line per refund or email that really
happened (the ledger), and ``attempts.jsonl`` one line per time an implementation of
``refund`` ran, naming it, its call and attempt: what a test compares with the journal to show
that no implementation ran on a contract the run had not accepted.

    tether crashtest examples.refund_deploy:scenario --after-deploy
"""

from __future__ import annotations

import json
import os
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from tether.models import Message, Model, ModelReply, ScriptedModel, SystemPrompt, ToolDefinition
from tether.testing import Scenario, accept_contracts
from tether.tools import ToolContext, ToolRegistry

RUN_ID = "run-refund-o7"
PROMPT = "Order o-7: one item arrived broken and the parcel was late. Refund, tell the customer."


def _append_line(path: Path, value: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(value) + "\n").encode())  # one small write: whole or absent
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Services:
    """Payments and email: one JSON line per effect, deduplicated by the request's key.

    Each call reads the file again, so a killed process keeps nothing of it in memory.
    """

    def __init__(self, root: Path) -> None:
        self.effects_path = root / "effects.jsonl"
        self.attempts_path = root / "attempts.jsonl"

    def do(self, effect: str, key: str) -> dict[str, Any]:
        """Do ``effect`` once per ``key``; a key seen before gets the first result back."""
        for line in _lines(self.effects_path):
            if line["key"] == key:
                return dict(line["result"])
        result = {"done": effect}
        _append_line(self.effects_path, {"effect": effect, "key": key, "result": result})
        return result

    def attempted(self, implementation: str, ctx: ToolContext) -> None:
        """Note that ``implementation`` ran for attempt ``ctx.attempt`` of call ``ctx.call_id``."""
        entry = {"implementation": implementation, "call_id": ctx.call_id, "attempt": ctx.attempt}
        _append_line(self.attempts_path, entry)

    def effects(self) -> Counter[str]:
        """What really happened, one count per line."""
        return Counter(line["effect"] for line in _lines(self.effects_path))

    def attempts(self) -> list[dict[str, Any]]:
        """Every run of an implementation of ``refund``, in order."""
        return _lines(self.attempts_path)


def answer(shown: dict[str, ToolDefinition], messages: list[Message]) -> Any:
    """The model: three turns, then the summary. ``shown``: the tool definitions it is given."""
    use = ScriptedModel.tool_use
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn == 0:
        return [use("toolu_1", "refund", {"order": "o-7", "amount": 20})]
    if turn == 1:
        text = "We refunded the broken item; shipping follows."
        return [use("toolu_2", "email_customer", {"order": "o-7", "text": text})]
    if turn == 2:
        args: dict[str, Any] = {"order": "o-7", "amount": 5}
        if "reason" in shown["refund"]["input_schema"].get("properties", {}):
            args["reason"] = "late delivery"  # the contract has one now: give it
        return [use("toolu_3", "refund", args)]
    return "Refunded 20 for the item and 5 for shipping; the customer knows."


class Clerk:
    """The scripted model, answering from the conversation *and* the tools it is shown (a
    real model reads both)."""

    @property
    def name(self) -> str:
        return "clerk"

    @property
    def params(self) -> dict[str, Any]:
        return {"script": "refund-deploy"}

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        shown = {t["name"]: t for t in tools}
        model = ScriptedModel(partial(answer, shown))
        return await model(system=system, messages=messages, tools=tools)


def _tools(services: Services, version: str) -> ToolRegistry:
    """The application's tools, as deployed in ``version``: ``"1"``, ``"2"`` (a required
    ``reason``, a new version of ``refund``) or ``"2-compatible"`` (an optional one, same
    version, declared compatible)."""
    tools = ToolRegistry()

    @tools.tool(policy="idempotency_key", approval=True)
    async def email_customer(order: str, text: str, ctx: ToolContext) -> dict[str, Any]:
        """Email the customer about an order."""
        return services.do(f"email {order}", ctx.idempotency_key)

    if version == "1":

        @tools.tool(policy="idempotency_key")
        async def refund(order: str, amount: float, ctx: ToolContext) -> dict[str, Any]:
            """Refund part of an order."""
            services.attempted("v1", ctx)
            return services.do(f"refund {order} {amount:g} (v1)", ctx.idempotency_key)

    elif version == "2":

        @tools.tool(name="refund", version="2", policy="idempotency_key")
        async def refund_v2(
            order: str, amount: float, reason: str, ctx: ToolContext
        ) -> dict[str, Any]:
            """Refund part of an order, saying why (the payments service records it)."""
            services.attempted("v2", ctx)
            return services.do(f"refund {order} {amount:g} for {reason} (v2)", ctx.idempotency_key)

    else:

        @tools.tool(name="refund", policy="idempotency_key", compatible=True)
        async def refund_with_reason(
            order: str, amount: float, ctx: ToolContext, reason: str = ""
        ) -> dict[str, Any]:
            """Refund part of an order, saying why if you know."""
            services.attempted("v2", ctx)
            why = f" for {reason}" if reason else ""
            return services.do(f"refund {order} {amount:g}{why} (v2)", ctx.idempotency_key)

    return tools


# --8<-- [start:scenario]
def _scenario(root: Path, deployed: str) -> Scenario:
    services = Services(root)
    version_file = root / "version"

    def build() -> tuple[Model, ToolRegistry]:
        try:
            version = version_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            version = "1"
        return Clerk(), _tools(services, version)

    def deploy() -> None:
        version_file.write_text(deployed + "\n", encoding="utf-8")

    return Scenario(
        build=build,
        prompt=PROMPT,
        ledger=services.effects,
        run_id=RUN_ID,
        deploy=deploy,
        repin=accept_contracts,
    )


def scenario(root: Path) -> Scenario:
    """Version 2 makes ``reason`` required: the run parks for its contract and a person
    repins it."""
    return _scenario(root, "2")


def compatible(root: Path) -> Scenario:
    """Version 2 adds an optional ``reason``, declared compatible: the worker takes it over."""
    return _scenario(root, "2-compatible")


# --8<-- [end:scenario]
