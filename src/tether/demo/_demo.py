"""What a demo is and how one runs: a crash-test scenario, driven by the crash-test harness,
printed as a timeline, summed up as what the outside world saw.

A demo (``Demo``) names a scenario factory of ``tether.testing`` (and its variant whose
side-effecting tool drops the idempotency key). ``drive`` runs it as a series of real child
processes through the harness (``tether.testing._drive``)::

    python -m tether.testing MODULE:NAME --root ROOT --step start  --flat --timeline
    python -m tether.testing MODULE:NAME --root ROOT --step resume --flat --timeline

(``python -m tether.demo NAME start|resume --root ROOT`` is the same child under the demo's
name). One child may be killed with a real ``SIGKILL`` at a runtime crash point
(``TETHER_CRASH_AT=tool_returned:1``). Whenever the run parks waiting for a person, the
harness records the person's ``Decision`` in the run's journal, the way a support tool would,
and starts the next process. ``--flat`` keeps the store and the services' files side by side
in ``ROOT`` (``ROOT/runs/<run>.journal``, ``ROOT/helpdesk.db``), so that ``--root`` shows the
demo's world as it is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..journal import Decision, FileStore
from ..supervisor import RunStatus
from ..testing import Kill, Pending
from ..testing._harness import Decide, ProcessResult, ScenarioFactory, Target, resolve_target
from ..testing._harness import drive as drive_case
from ._printer import TimelinePrinter


class DemoError(Exception):
    """The demo could not run as designed (a child failed, a run got stuck, a bad root)."""


def say(line: str) -> None:
    """Print ``line`` from a demo's process (flushed, so the parent has it before a kill)."""
    print(line, flush=True)


@dataclass(frozen=True, kw_only=True)
class Demo:
    """One demo agent: the crash-test scenario it runs and the words its summary uses.

    Attributes:
        name: the name ``tether demo NAME`` (and ``python -m tether.demo NAME``) knows it by.
        run_id: the run's id (the scenario's).
        scenario: the scenario factory; its side-effecting tool passes its idempotency key.
        without_key: the same scenario, with the tool leaving the key out.
        effect_name: what its side effects are called in summaries (``"replies"``).
        effect_label: the sentence the result block prints before the count.
    """

    name: str
    run_id: str
    scenario: ScenarioFactory
    without_key: ScenarioFactory
    effect_name: str
    effect_label: str

    def target(self, *, idempotency: bool = True, trace: bool = False) -> Target:
        """What the harness runs for this demo: children that print their timeline, over a
        root that holds the store and the services side by side."""
        spec, factory, paths = resolve_target(self.scenario if idempotency else self.without_key)
        return Target(spec, factory, paths, flat=True, timeline=True, trace=trace)


@dataclass
class DemoResult:
    """Where ``drive`` left a demo: the run's end state and what it cost."""

    processes: list[ProcessResult]
    status: str
    final_text: str | None
    effects: int
    model_calls: int
    recorded_model_calls: int
    journal_events: int
    journal_bytes: int
    journal_path: Path


def _answering(decision: Decision | None) -> Decide:
    """A ``decide`` that records ``decision`` when the run waits for its call, and nothing
    else (``None``: nobody answers)."""

    def answer(pending: Pending) -> Decision | None:
        if decision is None or pending.escalated or pending.call_id != decision.call_id:
            return None
        return decision

    return answer


def drive(
    demo: Demo,
    root: Path,
    *,
    idempotency: bool = True,
    decide: Decision | None = None,
    crash: Kill | None = None,
    trace: bool = False,
    echo: Callable[[str], None] | None = None,
) -> DemoResult:
    """Run ``demo`` to its end in fresh child processes under ``root``; see the module
    docstring.

    Process 1 starts the run, each later one resumes it. A process armed with ``crash`` must
    die with ``SIGKILL``; every other one must exit 0. When the run waits for approval,
    ``decide`` is recorded before the next process. With ``trace``, each process lists the
    crash points it passes (``DemoResult.processes[i].points``); with ``echo``, the timeline is
    printed through it.

    Raises:
        DemoError: a child failed or was not killed as armed, a record was lost, the run
            waited for a decision nobody gives, or it did not come to a rest.
    """
    root.mkdir(parents=True, exist_ok=True)
    watch = TimelinePrinter(echo) if echo is not None else None
    kills = () if crash is None else (crash,)
    target = demo.target(idempotency=idempotency, trace=trace)
    run = drive_case(target, root, kills, decide=_answering(decide), watch=watch)
    if run.status == "error" or run.lost:
        raise DemoError("; ".join(run.problems))
    if run.status == RunStatus.WAITING_FOR_APPROVAL.value:
        raise DemoError(f"run {demo.run_id} waits for a decision nobody gives")
    path = Path(FileStore(root).location(demo.run_id))
    return DemoResult(
        processes=run.processes,
        status=run.status,
        final_text=run.final_text,
        effects=sum(run.ledger.values()),
        model_calls=run.model_calls,
        recorded_model_calls=run.recorded_model_calls,
        journal_events=run.events,
        journal_bytes=path.stat().st_size,
        journal_path=path,
    )


@dataclass
class DemoSummary:
    """What a demo did, as the ``--json`` output and the tests see it."""

    demo: str
    run_id: str
    status: str
    effect_name: str
    effects: int
    expected_effects: int
    model_calls: int
    expected_model_calls: int
    recorded_model_calls: int
    processes: list[int]
    journal_events: int
    journal_bytes: int
    final_text: str | None
    idempotency_key: bool
    decision: str | None

    @property
    def ok(self) -> bool:
        """Whether the demo behaved as designed."""
        return (
            self.status == RunStatus.DONE.value
            and self.effects == self.expected_effects
            and self.model_calls == self.expected_model_calls
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "demo": self.demo,
            "run_id": self.run_id,
            "status": self.status,
            self.effect_name: self.effects,
            f"expected_{self.effect_name}": self.expected_effects,
            "model_calls": self.model_calls,
            "recorded_model_calls": self.recorded_model_calls,
            "processes": self.processes,
            "journal_events": self.journal_events,
            "journal_bytes": self.journal_bytes,
            "final_text": self.final_text,
            "idempotency_key": self.idempotency_key,
            "decision": self.decision,
            "ok": self.ok,
        }


def printer(out: TextIO) -> Callable[[str], None]:
    """A ``say`` function printing to ``out``, flushed line by line."""

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    return say


def prepare_root(root: Path) -> None:
    """Create ``root`` if needed; refuse one that already holds anything.

    Raises:
        DemoError: ``root`` is not empty.
    """
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise DemoError(f"{root} is not empty; give the demo a new or empty directory")


def print_result(
    summary: DemoSummary, outcome: DemoResult, effect_label: str, say: Callable[[str], None]
) -> None:
    """The ``== Result ==`` block every demo ends with."""
    n = len(summary.processes)
    say("== Result ==")
    say(f"status: {summary.status}")
    say(f"final answer: {summary.final_text}")
    say(
        f"journal: {outcome.journal_events} events, {outcome.journal_bytes} bytes "
        f"({outcome.journal_path.name})"
    )
    say(f"{effect_label}: {summary.effects}")
    where = {1: "in the one process", 2: "across both processes"}.get(
        n, f"across all {_number_word(n)} processes"
    )
    say(f"Model calls {where}: {summary.model_calls}")
    say(f"{summary.effect_name}: {summary.effects}  model calls: {summary.model_calls}")


def _number_word(n: int) -> str:
    words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[n] if n < len(words) else str(n)


def run_demo(
    demo: Demo,
    root: str | Path,
    *,
    idempotency: bool,
    crash: Kill | None,
    expected_effects: int,
    decide: Decision | None = None,
    json_out: bool = False,
    stream: TextIO | None = None,
) -> DemoSummary:
    """Run a demo in real child processes under ``root`` and report it.

    Prints the timeline and the result block (or, with ``json_out``, one JSON summary) to
    ``stream`` (stdout).

    Raises:
        DemoError: ``root`` is not empty, or a process failed.
    """
    out = stream or sys.stdout
    echo = None if json_out else printer(out)
    root = Path(root)
    prepare_root(root)
    outcome = drive(demo, root, idempotency=idempotency, decide=decide, crash=crash, echo=echo)
    summary = DemoSummary(
        demo=demo.name,
        run_id=demo.run_id,
        status=outcome.status,
        effect_name=demo.effect_name,
        effects=outcome.effects,
        expected_effects=expected_effects,
        model_calls=outcome.model_calls,
        expected_model_calls=4,
        recorded_model_calls=outcome.recorded_model_calls,
        processes=[p.returncode for p in outcome.processes],
        journal_events=outcome.journal_events,
        journal_bytes=outcome.journal_bytes,
        final_text=outcome.final_text,
        idempotency_key=idempotency,
        decision=None if decide is None else ("approved" if decide.approved else "rejected"),
    )
    if echo is None:
        print(json.dumps(summary.as_dict()), file=out, flush=True)
    else:
        print_result(summary, outcome, demo.effect_label, echo)
    return summary
