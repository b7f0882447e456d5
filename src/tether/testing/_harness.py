"""The crash harness's parts that the demo and ``tether crashtest`` build on: the child
process that runs a scenario, driving it to its end under crashes, scenarios and their
targets, the timeline a child prints, and a store URL fit to print.
"""

from __future__ import annotations

from ._casestore import redact_url as redact_url
from ._child import STATUS_MARK as STATUS_MARK
from ._child import child_main as child_main
from ._drive import ProcessResult as ProcessResult
from ._drive import Target as Target
from ._drive import drive as drive
from ._scenario import Decide as Decide
from ._scenario import ScenarioFactory as ScenarioFactory
from ._scenario import resolve_target as resolve_target
from ._timeline import Timeline as Timeline
