"""What a sweep does with each run it reads, and what it says it found.

A sweep lists the store's runs and reads those that may have changed; for each it decides,
from the journal alone (``run_status``) and the manifest this process can honour, whether to
start it (resume it, let it take answers from its inbox, or, for a *suspect* of a crash loop,
let it take its next step alone), or to note where it rests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container
from dataclasses import dataclass

from ..journal._protocols import Store
from ._manifest import manifest_problem
from ._runtime import Runtime
from ._state import RunState, RunStatus
from ._status import Outcome, run_status


@dataclass(frozen=True)
class Found:
    """What to do with one run a sweep read.

    Attributes:
        outcome: its status (``running`` when it is started).
        spawn: start it now.
        alone: a suspect: start it after the others, to take its next step alone.
        resumes: it is started to resume work (not only to take queued answers).
    """

    outcome: Outcome
    spawn: bool = False
    alone: bool = False
    resumes: bool = False


def what_to_do(
    state: RunState, rt: Runtime, *, inbox: bool, listed: Container[str] = ()
) -> Found | None:
    """The sweep's decision for a run whose journal folded to ``state`` (``None``: ignore it,
    it has no ``run_started`` yet); ``inbox``: answers wait in its inbox; ``listed``: the runs
    the sweep found (a run waiting for a child the sweep did not find is started, to create
    the child, or to take its end)."""
    if state.started is None:
        return None
    outcome = run_status(state, rt.clock())
    if outcome.status is RunStatus.WAITING and any(
        c.wait is not None
        and c.wait.child is not None
        and str(c.wait.child["run_id"]) not in listed
        and str(c.wait.child["run_id"]) not in state.children
        for c in state.calls.values()
    ):
        return Found(Outcome(RunStatus.RUNNING), spawn=True)
    if outcome.status is RunStatus.RUNNING:
        problem = manifest_problem(rt, state.manifest)
        if problem is not None:
            return Found(Outcome(RunStatus.NEEDS_ATTENTION, problem))
        if state.interruptions:
            return Found(outcome, spawn=True, alone=True, resumes=True)
        return Found(outcome, spawn=True, resumes=True)
    if not outcome.status.final and inbox:
        # answers wait: the run takes them (until it rests again, it is running)
        return Found(Outcome(RunStatus.RUNNING), spawn=True)
    return Found(outcome)


def start_line(store: Store, counts: Counter[str]) -> str:
    """What a supervisor found on entry, in one line."""
    where = getattr(store, "root", None) or type(store).__name__
    total = sum(counts.values())
    if not total:
        return f"serving {where}: no runs yet"
    parts = [f"{counts['resumed']} resumed"] if counts["resumed"] else []
    parts += [f"{n} {status}" for status, n in sorted(counts.items()) if status != "resumed"]
    return f"serving {where}: {total} runs ({', '.join(parts)})"
