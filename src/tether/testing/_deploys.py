"""Deploys in a test: assert that a change of the application strands no run in flight.

``tether check --app`` as functions: ``assert_strands_nothing`` against a store (a copy of
production's, say) and ``check_journals`` against recorded journal files, so that a team's
test suite fails on a change that would park runs, before it is deployed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..journal import RunStore
from ..journal._layout import read_file, scan
from ..operate import DeployCheck, check_deploy, check_runs
from ..supervisor import WorkerApp, fold


async def assert_strands_nothing(store: RunStore, app: WorkerApp) -> DeployCheck:
    """Check that ``app`` can continue every unfinished run of ``store``; return the report.

    Raises:
        AssertionError: some run would be stranded; the message is ``tether check``'s report.
    """
    report = await check_deploy(store, app)
    if not report.ok:
        raise AssertionError("\n".join(report.lines()))
    return report


def check_journals(paths: Iterable[str | os.PathLike[str]], app: WorkerApp) -> DeployCheck:
    """What deploying ``app`` would do to the runs recorded in the journal files ``paths``.

    Raises:
        JournalCorruptError, JournalVersionError, OSError: a file cannot be read.
    """
    states = []
    for path in paths:
        name = os.fspath(path)
        result = scan(read_file(name), name)
        result.raise_if_corrupt(name)
        states.append(fold(result.events))
    return check_runs(states, app)
