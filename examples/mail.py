"""The email agent of ``tether demo mail`` as a crash-test scenario.

``search_notes`` -> ``summarise`` -> ``send_email`` (policy ``idempotency_key``), then a final
answer. The mail service appends one JSON line per delivered email to a file under the
scenario's root and deduplicates by key.

    tether crashtest examples.mail:scenario
"""

from __future__ import annotations

from pathlib import Path

from tether.demo import MAIL
from tether.demo._harness import Hooks
from tether.models import Model
from tether.testing import Scenario
from tether.tools import ToolRegistry


def scenario(root: Path) -> Scenario:
    """The Q3 report email."""

    def build() -> tuple[Model, ToolRegistry]:
        return MAIL.build(Hooks(root, MAIL.run_id), True)

    def ledger() -> dict[str, int]:
        return {"email to dana@example.com": MAIL.count_effects(root)}

    return Scenario(
        run_id=MAIL.run_id,
        prompt=MAIL.prompt,
        system=MAIL.system,
        budgets=MAIL.budgets,
        build=build,
        ledger=ledger,
    )
