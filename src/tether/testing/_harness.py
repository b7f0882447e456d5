"""The crash harness's parts that the demo and ``tether crashtest`` build on: the child
process that runs a scenario, driving it to its end under crashes, scenarios and their
targets, the timeline a child prints, a store URL fit to print, and stopping every child.
"""

from __future__ import annotations

from ._casestore import redact_url as redact_url
from ._child import STATUS_MARK as STATUS_MARK
from ._child import child_main as child_main
from ._children import Stopped as Stopped
from ._children import stop_children as stop_children
from ._drive import ProcessResult as ProcessResult
from ._drive import Target as Target
from ._drive import drive as drive
from ._scenario import Decide as Decide
from ._scenario import ScenarioFactory as ScenarioFactory
from ._scenario import resolve_target as resolve_target
from ._timeline import Timeline as Timeline
