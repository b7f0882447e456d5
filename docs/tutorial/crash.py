"""The support agent as a crash-test scenario: ``tether crashtest crash:scenario``.

``crash:broken`` is the same agent against a help desk that ignores keys, which crashtest
must catch.

Everything the agent changes in the world lives in files under ``root``, since a killed
process keeps nothing in memory: here the help desk's ``replies.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

from helpdesk import Helpdesk
from support import make_tools, scripted_model

import tether
from tether.testing import Scenario


def scenario(root: Path, *, dedupe: bool = True) -> Scenario:
    """One ticket, with an approval; ``ledger`` is what the help desk really sent."""
    helpdesk = Helpdesk(root / "replies.jsonl", dedupe=dedupe)

    def build() -> tuple[tether.Model, tether.ToolRegistry]:
        return scripted_model(), make_tools(helpdesk, approval=True)  # made in every process

    return Scenario(
        run_id="ticket-1",
        prompt="Ticket KITE-142 just came in.",
        build=build,
        ledger=helpdesk.sent,
    )


def broken(root: Path) -> Scenario:
    """The same agent against a help desk that ignores the idempotency key."""
    return scenario(root, dedupe=False)
