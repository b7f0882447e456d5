"""Runnable demos: agents killed with ``SIGKILL`` mid-run and resumed in fresh processes.

``tether demo`` (Kitebase) and ``tether demo mail`` on the command line; ``run_kitebase`` and
``run_mail`` from Python. Each runs the agent as a series of real child processes over one
store, kills one of them with a real ``SIGKILL`` at a runtime crash point, and reports what the
outside world saw (replies, emails) and how many model calls were made in all. Everything is
offline: the models are scripted and the services live in files under the demo's root.
"""

from __future__ import annotations

from ._harness import POINTS as POINTS
from ._harness import Crash as Crash
from ._harness import Decide as Decide
from ._harness import DemoError as DemoError
from ._harness import DemoSummary as DemoSummary
from ._harness import Outcome as Outcome
from ._harness import Scenario as Scenario
from ._harness import drive as drive
from ._kitebase import KITEBASE as KITEBASE
from ._kitebase import run_kitebase as run_kitebase
from ._mail import MAIL as MAIL
from ._mail import run_mail as run_mail

SCENARIOS: dict[str, Scenario] = {KITEBASE.name: KITEBASE, MAIL.name: MAIL}
"""Every demo scenario by name, as ``python -m tether.demo NAME`` knows it."""

__all__ = [
    "KITEBASE",
    "MAIL",
    "POINTS",
    "SCENARIOS",
    "Crash",
    "Decide",
    "DemoError",
    "DemoSummary",
    "Outcome",
    "Scenario",
    "drive",
    "run_kitebase",
    "run_mail",
]
