"""An order agent that uses every replay policy, against a fake shop service that counts what
really happened.

The model handles order A-1001 in six turns, one tool per turn:

=====================  ===================  ===============================================
tool                   policy               what a resumed run does with a dangling call
=====================  ===================  ===============================================
``lookup_order``       ``rerun``            reads again (reads are not side effects)
``charge_card``        ``idempotency_key``  charges again with the same key; the service
                                            returns the first charge and charges nothing
``create_shipment``    ``verify``           asks the service for a shipment with the
                                            call's reference; books one only if none exists
``notify_warehouse``   ``escalate``         stops the run as ``needs_attention``; ``decide``
                                            looks the reference up in the service, as a
                                            person would, and resolves the call as
                                            ``succeeded`` (with the recorded result) or
                                            ``retry``
``send_receipt``       ``idempotency_key``  waits for approval first (``approval=True``);
                                            ``decide`` approves it
=====================  ===================  ===============================================

The service is one SQLite file under the scenario's root. Every write is a row in ``effects``
(``kind``, ``order_id``, the request's ``reference``); only charges and receipts deduplicate by
it. The ledger counts the rows, so a charge or a warehouse note made twice shows up as a
duplicate.

    tether crashtest examples.all_policies:scenario
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from tether.journal import Budgets, Decision, Resolved
from tether.models import Message, Model, ScriptedModel
from tether.testing import Pending, Scenario
from tether.tools import ToolContext, ToolRegistry

RUN_ID = "run-order-a1001"
ORDER: dict[str, Any] = {
    "order_id": "A-1001",
    "customer": "Ada Lovelace",
    "email": "ada@example.com",
    "amount_cents": 4200,
    "address": "12 Analytical Row, London",
}
PROMPT = "Order A-1001 was paid for by card on delivery: charge it, ship it and send a receipt."
SYSTEM = "You are the order agent of a small shop. Use the tools, one at a time."

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind      TEXT NOT NULL,
    order_id  TEXT NOT NULL,
    reference TEXT NOT NULL,
    result    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reads (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT);
"""


class Shop:
    """The fake external service: payments, shipping, the warehouse and receipts.

    Each call opens the file, so a killed process keeps nothing of it in memory.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        return db

    def read_order(self, order_id: str) -> dict[str, Any]:
        with contextlib.closing(self._connect()) as db:
            db.execute("INSERT INTO reads (order_id) VALUES (?)", (order_id,))
        if order_id != ORDER["order_id"]:
            raise LookupError(f"no order {order_id}")
        return dict(ORDER)

    def write(self, kind: str, order_id: str, reference: str, dedupe: bool) -> dict[str, Any]:
        """Do one write; with ``dedupe``, a reference seen before returns the first result."""
        with contextlib.closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            if dedupe:
                row = db.execute(
                    "SELECT result FROM effects WHERE kind = ? AND reference = ?",
                    (kind, reference),
                ).fetchone()
                if row is not None:
                    db.execute("COMMIT")
                    return dict(json.loads(row[0]))
            (n,) = db.execute("SELECT COUNT(*) FROM effects WHERE kind = ?", (kind,)).fetchone()
            result = {"id": f"{kind}-{n + 1}", "order_id": order_id}
            db.execute(
                "INSERT INTO effects (kind, order_id, reference, result) VALUES (?, ?, ?, ?)",
                (kind, order_id, reference, json.dumps(result)),
            )
            db.execute("COMMIT")
            return result

    def find(self, kind: str, reference: str) -> dict[str, Any] | None:
        """The result of the ``kind`` write made with ``reference``, if there was one."""
        if not self.path.exists():
            return None
        with contextlib.closing(self._connect()) as db:
            row = db.execute(
                "SELECT result FROM effects WHERE kind = ? AND reference = ? ORDER BY id",
                (kind, reference),
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def effects(self) -> Counter[str]:
        """What really happened: ``"charge A-1001"`` and so on, one count per row."""
        if not self.path.exists():
            return Counter()
        with contextlib.closing(self._connect()) as db:
            rows = db.execute("SELECT kind, order_id FROM effects").fetchall()
        return Counter(f"{kind} {order_id}" for kind, order_id in rows)


# What each tool writes, by tool name: the kind of row it leaves in the shop.
KINDS = {
    "charge_card": "charge",
    "create_shipment": "shipment",
    "notify_warehouse": "warehouse-note",
    "send_receipt": "receipt",
}


def _results(messages: list[Message]) -> list[Any]:
    found = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    text = block.get("content")
                    found.append(json.loads(text) if isinstance(text, str) else text)
    return found


def script(messages: list[Message]) -> Any:
    """The model: one tool call per turn, then an answer built from the tools' results."""
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    oid = ORDER["order_id"]
    steps = [
        ("lookup_order", {"order_id": oid}),
        ("charge_card", {"order_id": oid, "amount_cents": ORDER["amount_cents"]}),
        ("create_shipment", {"order_id": oid, "address": ORDER["address"]}),
        ("notify_warehouse", {"order_id": oid, "note": "fragile: pack with care"}),
        ("send_receipt", {"order_id": oid, "email": ORDER["email"]}),
    ]
    if turn < len(steps):
        name, args = steps[turn]
        return [ScriptedModel.tool_use(f"toolu_{turn + 1:02d}", name, args)]
    ids = [r.get("id") if isinstance(r, dict) else r for r in _results(messages)[1:]]
    return f"Order {oid} done: " + ", ".join(str(i) for i in ids) + "."


def scenario(root: Path) -> Scenario:
    """Order A-1001 through every policy; the receipt is approved, escalations resolved from
    the shop's records."""
    shop = Shop(root / "shop.db")

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="rerun")
        async def lookup_order(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            return await anyio.to_thread.run_sync(shop.read_order, order_id)

        @tools.tool(policy="idempotency_key")
        async def charge_card(order_id: str, amount_cents: int, ctx: ToolContext) -> Any:
            """Charge the order's card; the payment service deduplicates by key."""
            key = ctx.idempotency_key
            return await anyio.to_thread.run_sync(shop.write, "charge", order_id, key, True)

        async def find_shipment(order_id: str, address: str, ctx: ToolContext) -> Any:
            return await anyio.to_thread.run_sync(shop.find, "shipment", ctx.idempotency_key)

        @tools.tool(policy="verify", verify=find_shipment)
        async def create_shipment(order_id: str, address: str, ctx: ToolContext) -> Any:
            """Book a shipment. The carrier does not deduplicate, but can be asked."""
            key = ctx.idempotency_key
            return await anyio.to_thread.run_sync(shop.write, "shipment", order_id, key, False)

        @tools.tool  # policy "escalate", the default
        async def notify_warehouse(order_id: str, note: str, ctx: ToolContext) -> Any:
            """Leave a note for the warehouse. Not deduplicated, and nothing to ask."""
            key = ctx.idempotency_key
            return await anyio.to_thread.run_sync(
                shop.write, "warehouse-note", order_id, key, False
            )

        @tools.tool(policy="idempotency_key", approval=True)
        async def send_receipt(order_id: str, email: str, ctx: ToolContext) -> Any:
            """Email the receipt; a person approves it first."""
            key = ctx.idempotency_key
            return await anyio.to_thread.run_sync(shop.write, "receipt", order_id, key, True)

        return ScriptedModel(script), tools

    # --8<-- [start:decide]
    def decide(pending: Pending) -> Decision | Resolved | None:
        if not pending.escalated:
            return pending.approve(by="grace")
        # A person checks the warehouse's log for the call's reference before answering.
        reference = f"{pending.run_id}:{pending.call_id}"
        found = shop.find(KINDS[pending.name], reference)
        if found is not None:
            return pending.succeeded(found, by="grace", note="found in the warehouse log")
        return pending.retry(by="grace", note="not in the warehouse log")

    # --8<-- [end:decide]

    return Scenario(
        run_id=RUN_ID,
        prompt=PROMPT,
        system=SYSTEM,
        budgets=Budgets(max_model_calls=12),
        build=build,
        ledger=shop.effects,
        decide=decide,
    )


def scenario_unresolved(root: Path) -> Scenario:
    """The same run, with nobody answering escalations: a kill inside ``notify_warehouse``
    leaves the run ``needs_attention`` (outcome ``parked``), with nothing done twice."""
    full = scenario(root)

    def decide(pending: Pending) -> Decision | Resolved | None:
        return None if pending.escalated else pending.approve(by="grace")

    return Scenario(
        run_id=full.run_id,
        prompt=full.prompt,
        system=full.system,
        budgets=full.budgets,
        build=full.build,
        ledger=full.ledger,
        decide=decide,
    )
