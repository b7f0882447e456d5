"""Tools for testing code built on tether.

``FaultyFileOps`` is a file layer that fails on purpose: pass it to ``FileStore(file_ops=...)``
to make a chosen ``pwrite``, ``fdatasync`` or other system call raise, write short, or run out
of space, and to count every call the store makes.

``run_crashtest`` and ``assert_crash_safe`` crash-test your own agent: they run a ``Scenario``
in child processes, kill it with ``SIGKILL`` at every crash point it passes, resume it in fresh
processes, and compare its side effects, final answer and model calls with an uninterrupted run
(``tether crashtest MODULE:SCENARIO`` on the command line).

``assert_strands_nothing`` and ``check_journals`` are ``tether check --app`` for a test: a
change of the application that would strand a run in flight fails the suite before it ships.

``VirtualClock`` is wall-clock time that moves only when a test says (``advance``) or when
every task waits (autojump, as trio's ``MockClock``): ``Supervisor(clock=VirtualClock(...))``
makes the supervisor's deadlines, timers, backoff and record times follow it, so a test of an
hour-long wait takes milliseconds.

``PostgresServer`` starts a throwaway PostgreSQL server (the binaries on ``PATH``) for tests and
benchmarks that need one, and removes it afterwards.

The crash-test names and the clock are imported on first use, so a process that only needs
the fault layer does not pay for the harness. The runtime never imports this package (its
failpoints are its own, ``tether._failpoints``); the crash-point killer here is loaded only in
a process whose environment arms it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._public import publish as _publish
from ._faults import FaultyFileOps as FaultyFileOps

if TYPE_CHECKING:
    from ._clock import VirtualClock as VirtualClock
    from ._crashtest import assert_crash_safe as assert_crash_safe
    from ._crashtest import run_crashtest as run_crashtest
    from ._deploys import assert_strands_nothing as assert_strands_nothing
    from ._deploys import check_journals as check_journals
    from ._drive import Kill as Kill
    from ._pgserver import PostgresServer as PostgresServer
    from ._pgserver import PostgresUnavailableError as PostgresUnavailableError
    from ._report import Baseline as Baseline
    from ._report import CaseResult as CaseResult
    from ._report import Report as Report
    from ._scenario import Awaited as Awaited
    from ._scenario import CrashtestError as CrashtestError
    from ._scenario import Pending as Pending
    from ._scenario import Scenario as Scenario
    from ._scenario import Stranded as Stranded
    from ._scenario import accept_contracts as accept_contracts
    from ._scenario import approve_all as approve_all
    from ._scenario import deliver_nothing as deliver_nothing
    from ._scenario import leave_parked as leave_parked

_HARNESS = {
    "Awaited": "_scenario",
    "Baseline": "_report",
    "CaseResult": "_report",
    "CrashtestError": "_scenario",
    "Kill": "_drive",
    "Pending": "_scenario",
    "PostgresServer": "_pgserver",
    "PostgresUnavailableError": "_pgserver",
    "Report": "_report",
    "Scenario": "_scenario",
    "Stranded": "_scenario",
    "VirtualClock": "_clock",
    "accept_contracts": "_scenario",
    "approve_all": "_scenario",
    "assert_crash_safe": "_crashtest",
    "assert_strands_nothing": "_deploys",
    "check_journals": "_deploys",
    "deliver_nothing": "_scenario",
    "leave_parked": "_scenario",
    "run_crashtest": "_crashtest",
}
"""The names loaded on first use, and the module each is defined in."""


def __getattr__(name: str) -> Any:
    module = _HARNESS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        _publish(__name__, globals(), [name])
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Awaited",
    "Baseline",
    "CaseResult",
    "CrashtestError",
    "FaultyFileOps",
    "Kill",
    "Pending",
    "PostgresServer",
    "PostgresUnavailableError",
    "Report",
    "Scenario",
    "Stranded",
    "VirtualClock",
    "accept_contracts",
    "approve_all",
    "assert_crash_safe",
    "assert_strands_nothing",
    "check_journals",
    "deliver_nothing",
    "leave_parked",
    "run_crashtest",
]

_publish(__name__, globals(), __all__)
