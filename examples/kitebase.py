"""The Kitebase support agent of ``tether demo`` as a crash-test scenario.

The agent looks ticket KITE-142 up, searches the help center and replies to the customer; the
reply (policy ``idempotency_key``) needs priya's approval, so the run parks and a later process
sends it. The help desk is a SQLite file under the scenario's root that deduplicates by key.
The demo is this very scenario, killed once, with its timeline printed.

    tether crashtest examples.kitebase:scenario
"""

from __future__ import annotations

from tether.demo import KITEBASE

scenario = KITEBASE.scenario
"""Ticket KITE-142, with every reply approved by priya."""
