"""An order agent with a tool of each replay policy: ``python shop.py RUN_ID``.

The payments service and the warehouse keep what they did in files (``payments.jsonl``,
``shipments.jsonl``), so a process killed with ``SIGKILL`` cannot lose the record of a charge.
Neither deduplicates: the payments service can only be searched by the reference a charge was
made with, and the warehouse cannot be asked at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

import tether

PAYMENTS = Path("payments.jsonl")
SHIPMENTS = Path("shipments.jsonl")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _add(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")


tools = tether.ToolRegistry()


# --8<-- [start:rerun]
@tools.tool(policy="rerun")  # a read: run it again
async def find_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "amount": 40, "address": "1 Kite Lane"}


# --8<-- [end:rerun]


# --8<-- [start:verify]
async def charge_landed(order_id: str, amount: int, ctx: tether.ToolContext) -> Any:
    """The charge this call made, if the payments service has it; ``None`` if it has not."""
    found = [c for c in _lines(PAYMENTS) if c["reference"] == ctx.idempotency_key]
    print(f"verify: {'found' if found else 'no'} charge for {ctx.idempotency_key}", flush=True)
    return found[0] if found else None


@tools.tool(policy="verify", verify=charge_landed, timeout=30, retries=2, retry_on=ConnectionError)
async def charge_card(order_id: str, amount: int, ctx: tether.ToolContext) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    charge = {"order_id": order_id, "amount": amount, "reference": ctx.idempotency_key}
    _add(PAYMENTS, charge)
    print(f"payments: charged {amount} for {order_id}", flush=True)
    return charge


# --8<-- [end:verify]


# --8<-- [start:escalate]
@tools.tool()  # policy "escalate", the default: after a crash, a person decides
async def ship_order(order_id: str, address: str) -> dict[str, Any]:
    """Send the order to the customer."""
    _add(SHIPMENTS, {"order_id": order_id, "address": address})
    print(f"warehouse: shipped {order_id}", flush=True)
    return {"shipped": True}


# --8<-- [end:escalate]


def model_for(order_id: str) -> tether.ScriptedModel:
    """The model's answers, scripted: look up, charge, ship, report."""
    use = tether.ScriptedModel.tool_use
    return tether.ScriptedModel(
        [
            [use("toolu_01", "find_order", {"order_id": order_id})],
            [use("toolu_02", "charge_card", {"order_id": order_id, "amount": 40})],
            [use("toolu_03", "ship_order", {"order_id": order_id, "address": "1 Kite Lane"})],
            f"Order {order_id} is paid and on its way.",
        ]
    )


async def main(run_id: str) -> None:
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=model_for(run_id), tools=tools) as sup:
        if not await store.exists(run_id):
            await sup.start(run_id, f"Fulfil order {run_id}.")
        status = await sup.wait(run_id)
        view = await sup.inspect(run_id)
        print(f"{run_id}: {status.value}", view.final_text or view.reason)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
