"""Tools for testing code built on tether.

``FaultyFileOps`` is a file layer that fails on purpose: pass it to ``FileStore(file_ops=...)``
to make a chosen ``pwrite``, ``fdatasync`` or other system call raise, write short, or run out
of space, and to count every call the store makes.

``run_crashtest`` and ``assert_crash_safe`` crash-test your own agent: they run a ``Scenario``
in child processes, kill it with ``SIGKILL`` at every crash point it passes, resume it in fresh
processes, and compare its side effects, final answer and model calls with an uninterrupted run
(``tether crashtest MODULE:SCENARIO`` on the command line).

The crash-test names are imported on first use, so a process that only needs the fault layer
does not pay for the harness. The runtime never imports this package (its failpoints are its
own, ``tether._failpoints``); the crash-point killer here is loaded only in a process whose
environment arms it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._faults import FaultyFileOps as FaultyFileOps

if TYPE_CHECKING:
    from ._harness import Baseline as Baseline
    from ._harness import CaseResult as CaseResult
    from ._harness import CrashtestError as CrashtestError
    from ._harness import Kill as Kill
    from ._harness import Pending as Pending
    from ._harness import Report as Report
    from ._harness import Scenario as Scenario
    from ._harness import approve_all as approve_all
    from ._harness import assert_crash_safe as assert_crash_safe
    from ._harness import run_crashtest as run_crashtest

_HARNESS = frozenset(
    {
        "Baseline",
        "CaseResult",
        "CrashtestError",
        "Kill",
        "Pending",
        "Report",
        "Scenario",
        "approve_all",
        "assert_crash_safe",
        "run_crashtest",
    }
)


def __getattr__(name: str) -> Any:
    if name in _HARNESS:
        from . import _harness

        value = getattr(_harness, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Baseline",
    "CaseResult",
    "CrashtestError",
    "FaultyFileOps",
    "Kill",
    "Pending",
    "Report",
    "Scenario",
    "approve_all",
    "assert_crash_safe",
    "run_crashtest",
]
