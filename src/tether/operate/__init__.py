"""What a person sees of runs and does to them, from the store alone: no application loaded.

Shared by the operator commands (``tether runs``, ``show``, ``approve``...) and the web console
(``tether.web``): a run's summary (``summarize``: status, counters, what it waits for, as
``run_status`` says), one-line descriptions of its events (``describe``), and the answers a
person gives (``decide``, ``resolve``, ``retry``, ``signal``, ``cancel``): the one
implementation of each verb, which ``Supervisor``'s methods use too, checked by the
supervisor's own rule (``answer_problem``) and appended to the journal, or queued in the run's
inbox while a worker holds it (which then records it: a cancellation within about a second).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import on_demand as _on_demand
from .._public import publish as _publish
from ._acknowledge import acknowledgement as acknowledgement
from ._describe import describe as describe
from ._summary import Question as Question
from ._summary import Rest as Rest
from ._summary import RunSummary as RunSummary
from ._summary import as_tree as as_tree
from ._summary import load_summaries as load_summaries
from ._summary import load_summary as load_summary
from ._summary import summarize as summarize

__all__ = [
    "DeployCheck",
    "Question",
    "Recorded",
    "Rest",
    "RunCheck",
    "RunSummary",
    "acknowledgement",
    "as_tree",
    "cancel",
    "check_deploy",
    "check_runs",
    "check_signal_id",
    "decide",
    "describe",
    "load_summaries",
    "load_summary",
    "record_answer",
    "repin",
    "resolve",
    "retry",
    "signal",
    "summarize",
]

ON_DEMAND = {
    "DeployCheck": "tether.operate._deploy",
    "RunCheck": "tether.operate._deploy",
    "check_deploy": "tether.operate._deploy",
    "check_runs": "tether.operate._deploy",
    "Recorded": "tether.supervisor._verbs",
    "record_answer": "tether.supervisor._verbs",
    "cancel": "tether.supervisor._verbs",
    "check_signal_id": "tether.supervisor._verbs",
    "decide": "tether.supervisor._verbs",
    "repin": "tether.supervisor._verbs",
    "resolve": "tether.supervisor._verbs",
    "retry": "tether.supervisor._verbs",
    "signal": "tether.supervisor._verbs",
}
"""The verbs and the deploy check, imported when first used: reading a store (``tether runs``)
never needs them."""

if TYPE_CHECKING:
    from ..supervisor._verbs import Recorded as Recorded
    from ..supervisor._verbs import cancel as cancel
    from ..supervisor._verbs import check_signal_id as check_signal_id
    from ..supervisor._verbs import decide as decide
    from ..supervisor._verbs import record_answer as record_answer
    from ..supervisor._verbs import repin as repin
    from ..supervisor._verbs import resolve as resolve
    from ..supervisor._verbs import retry as retry
    from ..supervisor._verbs import signal as signal
    from ._deploy import DeployCheck as DeployCheck
    from ._deploy import RunCheck as RunCheck
    from ._deploy import check_deploy as check_deploy
    from ._deploy import check_runs as check_runs
else:
    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})


_publish(__name__, globals(), __all__)
