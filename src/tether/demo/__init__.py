"""Runnable demos: agents killed with ``SIGKILL`` mid-run and resumed in fresh processes.

``tether demo`` (Kitebase) and ``tether demo mail`` on the command line; ``run_kitebase`` and
``run_mail`` from Python. Each demo is a crash-test scenario of ``tether.testing`` run through
the crash-test harness: a series of real child processes over one store, one of them killed
with a real ``SIGKILL`` at a runtime crash point, and a timeline printed from the journal. It
reports what the outside world saw (replies, emails) and how many model calls were made in all.
Everything is offline: the models are scripted and the services live in files under the demo's
root.

``Crash`` is the harness's ``Kill`` (kill process N the n-th time it passes a point), ``Decide``
the journal's ``Decision`` record a person's answer is, and ``POINTS`` the runtime's crash
points.
"""

from __future__ import annotations

from .._failpoints import POINTS as POINTS
from .._public import publish as _publish
from ..journal import Decision as Decide
from ..testing import Kill as Crash
from ._demo import Demo as Demo
from ._demo import DemoError as DemoError
from ._demo import DemoResult as DemoResult
from ._demo import DemoSummary as DemoSummary
from ._demo import drive as drive
from ._kitebase import KITEBASE as KITEBASE
from ._kitebase import run_kitebase as run_kitebase
from ._mail import MAIL as MAIL
from ._mail import run_mail as run_mail

SCENARIOS: dict[str, Demo] = {KITEBASE.name: KITEBASE, MAIL.name: MAIL}
"""Every demo by name, as ``tether demo NAME`` and ``python -m tether.demo NAME`` know it."""

__all__ = [
    "KITEBASE",
    "MAIL",
    "POINTS",
    "SCENARIOS",
    "Crash",
    "Decide",
    "Demo",
    "DemoError",
    "DemoResult",
    "DemoSummary",
    "drive",
    "run_kitebase",
    "run_mail",
]

_publish(__name__, globals(), __all__)
