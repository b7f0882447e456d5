"""Running one case: a scenario's run as a series of fresh child processes, some killed.

``drive`` starts the run in process 1 and resumes it in each later one (``_child.py`` is what
they run), until it rests. A process armed with a ``Kill`` gets ``TETHER_CRASH_AT=POINT:N`` in
its environment and must die there with a real ``SIGKILL``; every other one must exit 0. A
killed process is always followed by a fresh one, even when the journal already says the run
finished: resuming a finished run must do nothing at all. When the run rests waiting for a
person, the scenario's ``decide`` answers, the answers are recorded in the run's journal the way
a support tool would, and the next process carries on; when it rests waiting for an event, the
scenario's ``deliver`` sends it the same way (or, if it sends nothing, the harness waits for
the wait's timeout before the next process).

A scenario with a ``deploy`` deploys its changed application the first time the run rests in
flight, before that rest is answered: every later process runs the new application. A run
that one of them parks for its contract is answered by the scenario's ``repin`` with the
record ``tether repin`` writes, to the deployed application's contracts (``repin_plan``),
checked as that command checks it.

Nothing is carried between processes in memory. Between two of them the harness reads the run
(``CaseStore``) to notice records that were durable once and are gone, or that a killed process
had acknowledged at its crash point and never made durable. A ``Watcher`` may follow the case
as it goes: ``tether demo`` prints its timeline that way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..journal import (
    AnyEvent,
    Decision,
    Escalated,
    ModelResponse,
    Repinned,
    Resolved,
    Retried,
    Signal,
    ToolFailed,
    ToolResult,
    ToolStarted,
    Waiting,
)
from ..operate._deploy import repin_plan
from ..supervisor import RunStatus, fold
from ..supervisor._contracts import CONTRACT, contracts_for
from ..supervisor._verbs import answer_problem
from . import _children as children
from ._casestore import CaseStore, FileCase, postgres_case
from ._child import CHILD_TIMEOUT_S, MODEL_CALLS_LOG, STATUS_MARK, STORE_ENV, case_dirs
from ._scenario import Awaited, Decide, Pending, Scenario, ScenarioFactory, Stranded, ledger_of

MAX_PROCESSES = 12
"""Processes one case may start before it counts as stuck."""

_ACKNOWLEDGED: dict[str, tuple[type[AnyEvent], ...]] = {
    "model_saved": (ModelResponse,),
    "tool_started": (ToolStarted,),
    "result_saved": (ToolResult, Waiting, ToolFailed),  # how a tool's attempt ended
    "contract_taken": (Repinned, Retried),
}
"""The records one of which a process has made durable when it passes each of these crash
points."""

UNREACHED = "unreached"
"""A case's status when a process ended cleanly before its kill point: nothing was tested."""

_ANSWERABLE = (
    RunStatus.WAITING_FOR_APPROVAL.value,
    RunStatus.NEEDS_ATTENTION.value,
    RunStatus.SLEEPING.value,
)
"""The statuses in which the harness answers the run, as people and the world would."""


@dataclass(frozen=True)
class Kill:
    """Kill process number ``process`` of a case the ``n``-th time it passes ``point``."""

    process: int
    point: str
    n: int = 1

    def __str__(self) -> str:
        return f"p{self.process} {self.point}:{self.n}"


@dataclass
class ProcessResult:
    """One child process of a case: how it was started, how it ended, what it did.

    Attributes:
        status: what the child reported on its status line (``status``, ``reason``,
            ``pending``); ``None`` when it printed none (killed, failed).
        points: the crash points it passed, in order (empty unless the case traces them).
        model_calls: the model answers it got.
    """

    number: int
    step: str
    kill: Kill | None
    returncode: int
    points: list[str]
    status: dict[str, Any] | None
    stdout: str
    stderr: str
    model_calls: int = 0

    @property
    def killed(self) -> bool:
        """Whether it died of ``SIGKILL``."""
        return self.returncode == -signal.SIGKILL


@dataclass
class CaseRun:
    """Where a case (or the baseline) left the run."""

    processes: list[ProcessResult]
    status: str  # the run's last status, "error" when a process failed, or UNREACHED
    reason: str
    final_text: str | None
    ledger: Counter[str]
    model_calls: int
    recorded_model_calls: int
    events: int
    escalations: int
    parked: bool
    decisions: int
    signals: int
    problems: list[str]  # errors and lost records found while driving
    lost: int
    deployed: int | None = None  # the first process that ran the scenario's deployed app
    repins: int = 0  # runs parked for their contract that the scenario's repin answered


class Watcher(Protocol):
    """Follows a case as ``drive`` runs it (each method is called in this order)."""

    def starting(self, number: int, step: str, kill: Kill | None, events: list[AnyEvent]) -> None:
        """Process ``number`` is about to start; ``events`` is the run so far."""
        ...

    def ended(self, process: ProcessResult, events: list[AnyEvent]) -> None:
        """A process ended, however it did; ``events`` is the run now."""
        ...

    def answered(self, records: list[AnyEvent], events: list[AnyEvent]) -> None:
        """A person's answers were recorded, as ``records``; ``events`` is the run now."""
        ...


@dataclass(frozen=True)
class Target:
    """What a case's children run, and how they are started.

    Attributes:
        spec: the scenario factory as ``MODULE:NAME``, for the children to import.
        factory: the same factory, in this process.
        paths: put on the children's ``PYTHONPATH``, so that they can import ``spec``.
        pycache: a bytecode cache the children share when the environment forbids writing one
            next to the sources (``PYTHONDONTWRITEBYTECODE``); ``None`` leaves it as it is.
        store: a ``postgresql://`` URL; ``None``: a ``FileStore`` in each case.
        keep: keep the cases' PostgreSQL schemas.
        flat: the scenario's root and the file store are the case directory itself.
        timeline: the children print the journal events they write.
        trace: the children list the crash points they pass (``ProcessResult.points``).
    """

    spec: str
    factory: ScenarioFactory
    paths: list[str]
    pycache: str | None = None
    store: str | None = None
    keep: bool = False
    flat: bool = False
    timeline: bool = False
    trace: bool = True

    def env(self, kill: Kill | None, trace: Path | None) -> dict[str, str]:
        """A child's environment: this one's, with the crash settings of this child only."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TETHER_CRASH_") and k != STORE_ENV
        }
        if self.pycache is not None and env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
            # Dozens of children would each compile everything again; let them share a
            # bytecode cache in the crash test's own directory instead of the source tree.
            env.setdefault("PYTHONPYCACHEPREFIX", self.pycache)
        paths = [*self.paths, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
        env["PYTHONIOENCODING"] = "utf-8"
        if trace is not None:
            env["TETHER_CRASH_TRACE"] = str(trace)
        if kill is not None:
            env["TETHER_CRASH_AT"] = f"{kill.point}:{kill.n}"
        if self.store is not None:
            env[STORE_ENV] = self.store
        return env

    def child_args(self, case: Path, step: str, schema: str | None = None) -> list[str]:
        """The arguments of ``python -m tether.testing`` for a child of the case in ``case``."""
        args = [self.spec, "--root", str(case), "--step", step]
        if schema is not None:
            args += ["--schema", schema]
        if self.flat:
            args.append("--flat")
        if self.timeline:
            args.append("--timeline")
        return args

    @contextmanager
    def case_store(self, case: Path, schema: str | None) -> Iterator[CaseStore]:
        """How the harness reaches the run of the case in directory ``case``."""
        if self.store is None or schema is None:
            yield FileCase(case_dirs(case, flat=self.flat)[1])
            return
        (case / "schema.txt").write_text(schema + "\n", encoding="utf-8")
        with postgres_case(self.store, schema, keep=self.keep) as store:
            yield store


def count_lines(path: Path) -> int:
    """Lines in a log file (0 if it does not exist yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def spawn(
    target: Target,
    case: Path,
    number: int,
    step: str,
    kill: Kill | None = None,
    schema: str | None = None,
) -> ProcessResult:
    """Run process ``number`` of the case in directory ``case``, a ``start`` or ``resume``
    step, in a fresh child; it is killed as ``kill`` says. A child that does not end in time
    is reported with exit code -1. What the child wrote to stderr is kept in the case's
    directory as ``stderr-NUMBER.txt``."""
    trace = case / f"trace-{number}.txt" if target.trace else None
    if trace is not None:
        trace.unlink(missing_ok=True)
    log = case / MODEL_CALLS_LOG
    before = count_lines(log)
    try:
        proc = children.run(
            [sys.executable, "-m", "tether.testing", *target.child_args(case, step, schema)],
            env=target.env(kill, trace),
            timeout=CHILD_TIMEOUT_S + 30,
        )
    except subprocess.TimeoutExpired:
        why = f"timed out: still running after {CHILD_TIMEOUT_S + 30:.0f} s, so it was killed"
        return ProcessResult(number, step, kill, -1, [], None, "", why)
    stdout = proc.stdout.decode("utf-8", "replace")
    status = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(STATUS_MARK):
            status = json.loads(line[len(STATUS_MARK) :])
            break
    points = trace.read_text(encoding="utf-8").split() if trace and trace.exists() else []
    stderr = proc.stderr.decode("utf-8", "replace").strip()
    if stderr:  # what the child logged, kept beside its trace for whoever reads a failed case
        (case / f"stderr-{number}.txt").write_text(stderr + "\n", encoding="utf-8")
    model_calls = count_lines(log) - before
    return ProcessResult(
        number, step, kill, proc.returncode, points, status, stdout, stderr, model_calls
    )


def drive(
    target: Target,
    case: Path,
    kills: Sequence[Kill],
    schema: str | None = None,
    *,
    decide: Decide | None = None,
    watch: Watcher | None = None,
) -> CaseRun:
    """Run the scenario under ``case`` to a rest, killing processes as ``kills`` say.

    Args:
        target: what the children run.
        case: the case's directory, new or empty.
        kills: at most one per process.
        schema: the PostgreSQL schema of the case's run, if the target has a store.
        decide: answers the run when it waits for a person; the scenario's own by default.
        watch: told what happens, as it happens.

    Returns:
        Where the run ended. A process that ended otherwise than armed, a run that did not
        come to a rest in ``MAX_PROCESSES`` processes, and lost records are reported in its
        ``problems`` (and the first two as the status ``"error"``), not raised.

    Raises:
        CrashtestError: the case's PostgreSQL schema cannot be used.
    """
    world, _ = case_dirs(case, flat=target.flat)
    world.mkdir(parents=True, exist_ok=True)
    with target.case_store(case, schema) as store:
        return _drive_in(target, case, kills, schema, store, decide, watch)


def _drive_in(
    target: Target,
    case: Path,
    kills: Sequence[Kill],
    schema: str | None,
    store: CaseStore,
    decide: Decide | None,
    watch: Watcher | None,
) -> CaseRun:
    scenario = target.factory(case_dirs(case, flat=target.flat)[0])
    answer = decide or scenario.decide
    run_id = scenario.run_id
    armed = {k.process: k for k in kills}
    processes: list[ProcessResult] = []
    problems: list[str] = []
    snapshots: list[dict[str, list[AnyEvent]]] = []  # every run of the case, by run id
    decisions = signals = repins = 0
    deployed: int | None = None
    lost = 0
    status, reason = "", ""
    for number in range(1, MAX_PROCESSES + 1):
        kill = armed.get(number)
        before_all = store.read_all()
        before = before_all.get(run_id, [])
        step = "start" if number == 1 else "resume"
        if watch is not None:
            watch.starting(number, step, kill, before)
        proc = spawn(target, case, number, step, kill, schema)
        processes.append(proc)
        after_all = store.read_all()
        after = after_all.get(run_id, [])
        if watch is not None:
            watch.ended(proc, after)
        if kill is not None and proc.returncode == 0 and proc.status is not None:
            # It finished cleanly without passing the point as often as the baseline did: the
            # run took another path here (which of two concurrent runs parks first, say).
            problems.append(f"process {number} ({step}) ended without reaching {kill}")
            status = UNREACHED
            break
        expected = -signal.SIGKILL if kill is not None else 0
        if proc.returncode != expected:
            how = "killed by SIGKILL" if kill is not None else "exit 0"
            tail = proc.stderr.splitlines()[-1:] or ["no output"]
            problems.append(
                f"process {number} ({step}) ended with {proc.returncode}, expected {how}: "
                + tail[0]
            )
            status = "error"
            break
        snapshots.append(after_all)
        if kill is not None:
            store.buried()
            kinds = _ACKNOWLEDGED.get(kill.point)
            new = [  # in whichever run the process was at the point: a child run's, say
                e
                for run, events in after_all.items()
                for e in events
                if e.seq > _last_seq(before_all.get(run, []))
            ]
            if kinds is not None and sum(isinstance(e, kinds) for e in new) < kill.n:
                lost += 1
                names = " or ".join(k.__name__ for k in kinds)
                problems.append(
                    f"lost: the {names} record process {number} saved before "
                    f"{kill.point}:{kill.n} is not in the journal"
                )
            continue  # a killed process is always followed by a fresh one
        assert proc.status is not None
        status, reason = proc.status["status"], proc.status["reason"]
        if status not in _ANSWERABLE:
            break
        if scenario.deploy is not None and deployed is None:
            scenario.deploy()  # in flight on the old contracts: the new app from here on
            deployed = number + 1
        others: dict[str, list[str]] = proc.status.get("others", {})
        asked = {run_id: proc.status["pending"], **others}
        answers: dict[str, list[Decision | Resolved | Signal | Repinned]] = {}
        for run, ids in asked.items():
            events = after if run == run_id else store.read(run)
            found = [answer(p) for p in pending_calls(run, events, ids)]
            answers.setdefault(run, []).extend(a for a in found if a is not None)
            contract = stranded(run, events, scenario)
            repinned = None if contract is None else scenario.repin(contract)
            if repinned is not None:
                refused = answer_problem(fold(events), repinned, time.time())
                if refused is not None:  # as `tether repin` would refuse it
                    problems.append(f"the repin of run {run} was refused: {refused}")
                    continue
                answers[run].append(repinned)
                repins += 1
        awaited = [Awaited(**fields) for fields in proc.status.get("awaited", [])]
        for call in awaited:
            delivered = scenario.deliver(call)
            if delivered is not None:
                answers.setdefault(call.run_id, []).append(delivered)
                signals += 1
        for run, records in answers.items():
            if records:
                store.record(run, records)
                decisions += sum(isinstance(r, Decision | Resolved) for r in records)
        if any(answers.values()):
            recorded_all = store.read_all()
            snapshots.append(recorded_all)
            recorded = recorded_all.get(run_id, [])
            if watch is not None:
                last = after[-1].seq if after else -1
                watch.answered([e for e in recorded if e.seq > last], recorded)
            continue
        timeouts = [c.until for c in awaited if c.until is not None]
        if status == RunStatus.SLEEPING.value and timeouts:
            time.sleep(max(0.0, min(timeouts) - time.time()) + 0.05)  # let the first time out
            continue
        break
    else:
        problems.append(f"the run did not come to a rest in {MAX_PROCESSES} processes")
        status = "error"
    final = store.read_all()
    events = final.get(run_id, [])
    by_seq = {(run, e.seq): e for run, evs in final.items() for e in evs}
    for snapshot in snapshots:
        changed = [
            (run, e.seq)
            for run, evs in snapshot.items()
            for e in evs
            if by_seq.get((run, e.seq)) != e
        ]
        if changed:
            lost += len(changed)
            where = ", ".join(f"{run}:{seq}" for run, seq in changed)
            problems.append(f"lost: records {where} were durable once and are gone or changed")
    state = fold(events)
    parked = status == RunStatus.NEEDS_ATTENTION.value and any(
        c.escalated for c in state.calls.values()
    )
    return CaseRun(
        processes=processes,
        status=status,
        reason=reason,
        final_text=state.final_text,
        ledger=ledger_of(scenario),
        model_calls=count_lines(case / MODEL_CALLS_LOG),
        recorded_model_calls=state.model_calls,
        events=len(events),
        escalations=sum(isinstance(e, Escalated) for e in events),
        parked=parked,
        decisions=decisions,
        signals=signals,
        problems=problems,
        lost=lost,
        deployed=deployed,
        repins=repins,
    )


def _last_seq(events: Sequence[AnyEvent]) -> int:
    return events[-1].seq if events else -1


def stranded(run_id: str, events: list[AnyEvent], scenario: Scenario) -> Stranded | None:
    """The run as the scenario's ``repin`` sees it if a process parked it for its contract,
    with what accepting the contracts of the application ``build`` makes now would pin."""
    state = fold(events)
    parked = state.parked
    if state.finished is not None or parked is None or parked.cause != CONTRACT:
        return None
    model, tools = scenario.build()
    pins, model_change = repin_plan(state, contracts_for(model, tools))
    return Stranded(run_id, parked.reason, tuple(pins), model_change)


def pending_calls(run_id: str, events: list[AnyEvent], ids: Sequence[str]) -> list[Pending]:
    """The calls among ``ids`` the run waits on a person for, as ``decide`` sees them."""
    calls = fold(events).calls
    found = []
    for call_id in ids:
        call = calls.get(call_id)
        if call is None or call.done:
            continue
        reason = call.escalation.reason if call.escalation is not None else ""
        found.append(
            Pending(
                run_id=run_id,
                call_id=call.id,
                name=call.name,
                input=call.input,
                escalated=call.escalated,
                reason=reason,
            )
        )
    return found
