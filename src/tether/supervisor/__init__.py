"""The supervisor: one child task per active run, the one agent loop, restarts.

See ``_loop`` for the ordering rules every step keeps, ``_state`` for how a run's state is
folded from its journal, ``_status`` for the one function that says where a run stands and
``_replay`` for the one decision of what happens to each tool call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import on_demand as _on_demand
from .._public import publish as _publish
from ._state import RunState as RunState
from ._state import RunStatus as RunStatus
from ._state import fold as fold
from ._status import Standing as Standing
from ._status import run_status as run_status

ON_DEMAND = {
    "Clock": "tether.supervisor._clock",
    "RunTelemetry": "tether.supervisor._telemetry",
    "RunView": "tether.supervisor._supervisor",
    "StatusChange": "tether.supervisor._supervisor",
    "Supervisor": "tether.supervisor._supervisor",
    "SystemClock": "tether.supervisor._clock",
    "WorkerApp": "tether.supervisor._worker",
    "load_app": "tether.supervisor._worker",
    "run_worker": "tether.supervisor._worker",
}
"""Imported when first used: the fold and the status function are what reading a journal
needs (``tether runs``, the console); the runtime comes with the first ``Supervisor``."""

if TYPE_CHECKING:
    from ._clock import Clock as Clock
    from ._clock import SystemClock as SystemClock
    from ._supervisor import RunView as RunView
    from ._supervisor import StatusChange as StatusChange
    from ._supervisor import Supervisor as Supervisor
    from ._telemetry import RunTelemetry as RunTelemetry
    from ._worker import WorkerApp as WorkerApp
    from ._worker import load_app as load_app
    from ._worker import run_worker as run_worker
else:
    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})


__all__ = [
    "Clock",
    "RunState",
    "RunStatus",
    "RunTelemetry",
    "RunView",
    "Standing",
    "StatusChange",
    "Supervisor",
    "SystemClock",
    "WorkerApp",
    "fold",
    "load_app",
    "run_status",
    "run_worker",
]

_publish(__name__, globals(), __all__)
