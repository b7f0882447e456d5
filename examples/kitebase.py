"""The Kitebase support agent of ``tether demo`` as a crash-test scenario.

The agent looks ticket KITE-142 up, searches the help center and replies to the customer; the
reply (policy ``idempotency_key``) needs priya's approval, so the run parks and a later process
sends it. The help desk is a SQLite file under the scenario's root that deduplicates by key.

    tether crashtest examples.kitebase:scenario
"""

from __future__ import annotations

from pathlib import Path

from tether.demo import KITEBASE
from tether.demo._harness import Hooks
from tether.journal import Decision, Resolved
from tether.models import Model
from tether.testing import Pending, Scenario
from tether.tools import ToolRegistry


def scenario(root: Path) -> Scenario:
    """Ticket KITE-142, with every reply approved by priya."""

    def build() -> tuple[Model, ToolRegistry]:
        return KITEBASE.build(Hooks(root, KITEBASE.run_id), True)

    def ledger() -> dict[str, int]:
        return {"reply to Northwind Studio on KITE-142": KITEBASE.count_effects(root)}

    def decide(pending: Pending) -> Decision | Resolved | None:
        return None if pending.escalated else pending.approve(by="priya")

    return Scenario(
        run_id=KITEBASE.run_id,
        prompt=KITEBASE.prompt,
        system=KITEBASE.system,
        budgets=KITEBASE.budgets,
        build=build,
        ledger=ledger,
        decide=decide,
    )
