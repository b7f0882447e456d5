"""The supervisor: one child task per active run, the one agent loop, restarts.

See ``_loop`` for the ordering rules every step keeps, ``_state`` for how a run's state is
folded from its journal, ``_status`` for the one function that says where a run stands and
``_replay`` for the one decision of what happens to each tool call.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._state import RunState as RunState
from ._state import RunStatus as RunStatus
from ._state import fold as fold
from ._status import Outcome as Outcome
from ._status import run_status as run_status
from ._supervisor import RunView as RunView
from ._supervisor import StatusChange as StatusChange
from ._supervisor import Supervisor as Supervisor
from ._telemetry import RunTelemetry as RunTelemetry
from ._worker import WorkerApp as WorkerApp
from ._worker import load_app as load_app
from ._worker import run_worker as run_worker

__all__ = [
    "Outcome",
    "RunState",
    "RunStatus",
    "RunTelemetry",
    "RunView",
    "StatusChange",
    "Supervisor",
    "WorkerApp",
    "fold",
    "load_app",
    "run_status",
    "run_worker",
]

_publish(__name__, globals(), __all__)
