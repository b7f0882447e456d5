"""What the demos share: the child process each step runs in, the live timeline it prints, the
model-call log, and the driver that runs a scenario across processes, killing one on request.

A demo is a ``Scenario``: a run id, a prompt, and a ``build`` function that makes the model and
the tools. The driver (``drive``) runs it as a series of real child processes::

    python -m tether.demo SCENARIO start  --root ROOT   # creates the run and drives it
    python -m tether.demo SCENARIO resume --root ROOT   # a Supervisor resumes unfinished runs

A child is killed with a real ``SIGKILL`` by arming one of the runtime's crash points in its
environment (``TETHER_CRASH_AT=tool_returned:1``). Whenever the run parks waiting for a person,
the driver records the person's decision by appending one ``Decision`` record to the run's
journal, the way a support tool would, and starts the next process.

Nothing is carried between processes in memory: every child opens the store, the services and
the model-call log fresh. A killed child cannot report anything when it dies, so every model call
is counted *as it happens*, one line per call appended to ``ROOT/model_calls.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..journal import (
    AnyEvent,
    Budgets,
    Decision,
    Escalated,
    FileStore,
    ModelFailed,
    ModelResponse,
    Parked,
    Resolved,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
)
from ..models import Model
from ..supervisor import RunStatus, RunView, Supervisor, fold
from ..testing._drive import count_lines as _count_lines
from ..tools import ToolRegistry

POINTS: tuple[str, ...] = (
    "model_answered",
    "model_saved",
    "tool_started",
    "tool_returned",
    "result_saved",
    "parked",
)
"""The runtime's crash points a scenario passes, in the order one step passes them."""

CRASH_MEANING: dict[str, str] = {
    "model_answered": "after the model answered, before its answer was saved",
    "model_saved": "right after the model's answer was saved",
    "tool_started": "after the start of {tool} was saved, before it ran",
    "tool_returned": "right after {tool} returned (its side effect done), "
    "before its result was saved",
    "result_saved": "right after the result of {tool} was saved",
    "parked": "after the run parked and closed its journal",
}
"""What a kill at each crash point interrupts; ``{tool}`` is the tool call it hit."""

MODEL_CALLS_LOG = "model_calls.log"
CHILD_TIMEOUT_S = 60.0
_SEQ_LINE = re.compile(r"^\s+seq (\d+)\s")


class DemoError(Exception):
    """The demo could not run as designed (a child failed, a run got stuck, a bad root)."""


# ---------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Crash:
    """Kill process number ``process`` the ``n``-th time it passes crash point ``point``."""

    process: int
    point: str
    n: int = 1

    @property
    def env(self) -> str:
        return f"{self.point}:{self.n}"


@dataclass(frozen=True)
class Decide:
    """A person's decision on the tool call ``call_id``, recorded when the run waits for it."""

    call_id: str
    approved: bool
    by: str
    note: str = ""


@dataclass(frozen=True)
class Scenario:
    """One demo agent: what to run and how to count what it did to the world.

    Attributes:
        name: the name ``python -m tether.demo NAME`` knows it by.
        run_id: the run's id.
        prompt, system, budgets: what the run starts with.
        effect_name: what its side effects are called in summaries (``"replies"``).
        effect_label: the sentence the result line prints before the count.
        build: makes the model and the tools for one process, given its ``Hooks`` and whether
            the side-effecting tool passes its idempotency key.
        count_effects: counts the side effects in the services under the root.
    """

    name: str
    run_id: str
    prompt: str
    system: str
    budgets: Budgets
    effect_name: str
    effect_label: str
    build: Callable[[Hooks, bool], tuple[Model, ToolRegistry]]
    count_effects: Callable[[Path], int]


class Hooks:
    """What a process's model and tools use to report: print lines, show journal progress,
    count model calls.

    A quiet ``Hooks`` (no ``echo``, no ``count_calls``) prints and counts nothing; the driver
    uses one to build a scenario's model and tools when it only inspects a run.
    """

    def __init__(
        self,
        root: Path,
        run_id: str,
        *,
        echo: Callable[[str], None] | None = None,
        count_calls: bool = False,
    ) -> None:
        self.root = root
        self.run_id = run_id
        self.echo = echo
        self.count_calls = count_calls
        self.store: FileStore | None = None
        self.timeline = Timeline()

    def say(self, line: str) -> None:
        """Print ``line`` (flushed, so a parent reading the pipe sees it before a kill)."""
        if self.echo is not None:
            self.echo(line)

    async def show_progress(self) -> None:
        """Print the journal events recorded since the last call, one line each."""
        if self.echo is None or self.store is None:
            return
        events = await self.store.read(self.run_id)
        for line in self.timeline.new_lines(events):
            self.say(line)

    def count_model_call(self) -> None:
        """Append one line to the model-call log (call it before the answer is returned)."""
        if not self.count_calls:
            return
        _append_line(self.root / MODEL_CALLS_LOG, f"{os.getpid()}\n")


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def hooked_model_function(
    hooks: Hooks, script: Callable[[list[dict[str, Any]]], Any]
) -> Callable[[list[dict[str, Any]]], Awaitable[Any]]:
    """Wrap a pure script function so each call shows progress first and is counted."""

    async def answer(messages: list[dict[str, Any]]) -> Any:
        await hooks.show_progress()
        reply = script(messages)
        hooks.count_model_call()
        return reply

    return answer


# ---------------------------------------------------------------------------- timeline


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _call_text(name: str, args: Any) -> str:
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    else:
        inner = json.dumps(args, ensure_ascii=False)
    return f"{name}({inner})"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


class Timeline:
    """Turns journal events into one-line descriptions, remembering what it already showed."""

    def __init__(self) -> None:
        self.shown = -1
        self.names: dict[str, str] = {}

    def skip_to(self, events: list[AnyEvent]) -> None:
        """Treat ``events`` as already shown."""
        for event in events:
            self.describe(event)
        if events:
            self.shown = events[-1].seq

    def new_lines(self, events: list[AnyEvent]) -> list[str]:
        """One ``  seq N  type  description`` line per event not shown yet."""
        lines = []
        for event in events:
            text = self.describe(event)
            if event.seq > self.shown:
                lines.append(f"  seq {event.seq:<3} {_tag(event):<15} {text}")
                self.shown = event.seq
        return lines

    def describe(self, event: AnyEvent) -> str:
        """A short, human description of ``event``."""
        if isinstance(event, RunStarted):
            last = event.messages[-1] if event.messages else {}
            content = last.get("content", "")
            return _short(f"{last.get('role', 'user')}: {_content_text(content)}", 72)
        if isinstance(event, ModelResponse):
            blocks = event.message.get("content") or []
            calls = [b for b in blocks if b.get("type") == "tool_use"]
            for b in calls:
                self.names[b["id"]] = b["name"]
            if calls:
                asks = "; ".join(_call_text(b["name"], b.get("input")) for b in calls)
                return _short(f"model asks for {asks}", 72)
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            return _short(f"model: {text}", 72)
        if isinstance(event, ToolStarted):
            self.names.setdefault(event.call_id, event.name)
            return f"{event.name or event.call_id} ({event.call_id}), attempt {event.attempt}"
        if isinstance(event, ToolResult):
            name = self.names.get(event.call_id, event.call_id)
            body = event.blob.summary if event.blob is not None else _content_text(event.content)
            mark = "->" if event.ok else "-> error:"
            return _short(f"{name} {mark} {body}", 72)
        if isinstance(event, Decision):
            verb = "approved" if event.approved else "rejected"
            note = f': "{event.note}"' if event.note else ""
            name = self.names.get(event.call_id, "")
            return f"{name} ({event.call_id}) {verb} by {event.by}{note}".lstrip()
        if isinstance(event, Resumed):
            return f"restart {event.attempt}: a new process took the run over"
        if isinstance(event, RunFinished):
            return event.status + (f": {event.reason}" if event.reason else "")
        if isinstance(event, Escalated):
            return _short(f"{event.call_id} needs a person: {event.reason}", 72)
        if isinstance(event, Resolved):
            return f"{event.call_id} resolved as {event.outcome} by {event.by}"
        if isinstance(event, Suspended):
            return "the process stopped on purpose; the next one resumes the run"
        if isinstance(event, (ModelFailed, ToolFailed)):
            return _short(f"{event.error}", 72)
        if isinstance(event, Parked):
            return _short(f"needs a person: {event.reason}", 72)
        if isinstance(event, Retried):
            return f"sent on by {event.by}"
        return ""  # pragma: no cover - every event type is handled above


def _tag(event: AnyEvent) -> str:
    return str(type(event).__struct_config__.tag)


# ---------------------------------------------------------------------------- child side


def child_main(scenario: Scenario, argv: list[str]) -> int:
    """``python -m tether.demo SCENARIO start|resume --root ROOT [--no-idempotency-key]``."""
    parser = argparse.ArgumentParser(prog=f"python -m tether.demo {scenario.name}")
    parser.add_argument("step", choices=("start", "resume"))
    parser.add_argument("--root", required=True)
    parser.add_argument("--no-idempotency-key", action="store_true")
    args = parser.parse_args(argv)
    hooks = Hooks(Path(args.root), scenario.run_id, echo=_say, count_calls=True)
    status = anyio.run(_child, scenario, args.step, hooks, not args.no_idempotency_key)
    return 0 if status.resting else 1


def _say(line: str) -> None:
    print(line, flush=True)


async def _child(scenario: Scenario, step: str, hooks: Hooks, idempotency: bool) -> RunStatus:
    model, tools = scenario.build(hooks, idempotency)
    run_id = scenario.run_id
    async with FileStore(hooks.root) as store:
        hooks.store = store
        if step == "resume":
            events = await store.read(run_id)
            hooks.timeline.skip_to(events)
            last = events[-1]
            dangling = " (no result yet: the call dangles)" if isinstance(last, ToolStarted) else ""
            hooks.say(
                f"loaded the journal: seq 0-{last.seq}, last event: {_tag(last)} "
                f"{hooks.timeline.describe(last)}{dangling}"
            )
        # On entry a Supervisor resumes every unfinished run of the store.
        async with Supervisor(store, model=model, tools=tools) as sup:
            if step == "start":
                await sup.start(
                    run_id, scenario.prompt, system=scenario.system, budgets=scenario.budgets
                )
            status = await sup.wait(run_id, timeout=CHILD_TIMEOUT_S)
            await hooks.show_progress()
            view = await sup.inspect(run_id)
    reason = f" ({view.reason})" if view.reason else ""
    hooks.say(f"status: {view.status.value}{reason}")
    return status


# ---------------------------------------------------------------------------- driver side


@dataclass
class ProcessResult:
    """One child process: how it was started, how it ended, what it did."""

    number: int
    step: str
    crash_at: str | None
    returncode: int
    stdout: str
    stderr: str
    model_calls: int
    points: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


@dataclass
class Outcome:
    """Where ``drive`` left a scenario: the run's end state and what it cost."""

    processes: list[ProcessResult]
    status: str
    final_text: str | None
    effects: int
    model_calls: int
    recorded_model_calls: int
    journal_events: int
    journal_bytes: int
    journal_path: Path


def _child_env(crash_at: str | None, trace: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH_")}
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    env["PYTHONIOENCODING"] = "utf-8"
    if crash_at is not None:
        env["TETHER_CRASH_AT"] = crash_at
    if trace is not None:
        env["TETHER_CRASH_TRACE"] = str(trace)
    return env


def spawn(
    scenario: Scenario,
    root: Path,
    number: int,
    step: str,
    *,
    idempotency: bool = True,
    crash_at: str | None = None,
    trace: bool = False,
) -> ProcessResult:
    """Run one step of ``scenario`` in a fresh ``python -m tether.demo`` process."""
    log = root / MODEL_CALLS_LOG
    before = _count_lines(log)
    trace_path = root / "trace" / f"process-{number}.txt" if trace else None
    if trace_path is not None:
        trace_path.parent.mkdir(exist_ok=True)
        trace_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tether.demo", scenario.name, step, "--root", str(root)]
    if not idempotency:
        cmd.append("--no-idempotency-key")
    try:
        proc = subprocess.run(
            cmd,
            env=_child_env(crash_at, trace_path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CHILD_TIMEOUT_S + 30,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DemoError(f"process {number} ({step}) did not finish in time") from exc
    points: list[str] = []
    if trace_path is not None and trace_path.exists():
        points = trace_path.read_text(encoding="utf-8").split()
    return ProcessResult(
        number=number,
        step=step,
        crash_at=crash_at,
        returncode=proc.returncode,
        stdout=proc.stdout.decode("utf-8", "replace"),
        stderr=proc.stderr.decode("utf-8", "replace"),
        model_calls=_count_lines(log) - before,
        points=points,
    )


async def _look(scenario: Scenario, root: Path) -> tuple[RunView, list[AnyEvent]]:
    model, tools = scenario.build(Hooks(root, scenario.run_id), True)
    async with (
        FileStore(root) as store,
        Supervisor(store, model=model, tools=tools, resume=False) as sup,
    ):
        return await sup.inspect(scenario.run_id), await store.read(scenario.run_id)


def look(scenario: Scenario, root: Path) -> tuple[RunView, list[AnyEvent]]:
    """The run as its journal tells it (status, messages, counters) and its events."""
    return anyio.run(_look, scenario, root)


async def _record(root: Path, run_id: str, decide: Decide) -> tuple[Decision, str]:
    async with FileStore(root) as store:
        journal = await store.open(run_id)  # takes the run's lock: no process may drive it now
        async with journal:
            call = fold(journal.events).calls.get(decide.call_id)
            if call is None or call.done or call.decision is not None:
                raise DemoError(f"call {decide.call_id!r} of {run_id} is not awaiting a decision")
            decision = Decision(
                call_id=decide.call_id, approved=decide.approved, by=decide.by, note=decide.note
            )
            [event] = await journal.append([decision])
    assert isinstance(event, Decision)
    return event, call.name


def record_decision(root: Path, run_id: str, decide: Decide) -> tuple[Decision, str]:
    """Append a person's ``Decision`` on a waiting call to the run's journal, then close it.

    This is all a support tool has to do when priya clicks "approve": one durable record under
    the journal's lock. No process is driving the run meanwhile; the next one that resumes the
    run reads the decision and carries on. (``Supervisor.decide`` records the same record but
    then goes on to drive the run in the calling process.)

    Returns:
        The recorded event and the name of the tool the call is for.
    """
    return anyio.run(_record, root, run_id, decide)


def drive(
    scenario: Scenario,
    root: Path,
    *,
    idempotency: bool = True,
    decide: Decide | None = None,
    crash: Crash | None = None,
    trace: bool = False,
    echo: Callable[[str], None] | None = None,
    max_processes: int = 6,
) -> Outcome:
    """Run ``scenario`` to its end in fresh child processes; see the module docstring.

    Process 1 starts the run, each later one resumes it. A process armed with ``crash`` must
    die with ``SIGKILL``; every other one must exit 0. When the run waits for approval,
    ``decide`` is recorded (once) before the next process.

    Raises:
        DemoError: a child failed or was not killed as armed, the run waited for a decision
            nobody gives, or it did not end within ``max_processes`` processes.
    """
    say = echo or (lambda _line: None)
    root.mkdir(parents=True, exist_ok=True)
    processes: list[ProcessResult] = []
    decided = False
    view: RunView | None = None
    events: list[AnyEvent] = []
    for number in range(1, max_processes + 1):
        step = "start" if number == 1 else "resume"
        crash_at = crash.env if crash is not None and crash.process == number else None
        title = "start the run" if step == "start" else "a fresh process resumes unfinished runs"
        if crash_at is not None:
            title += f" (armed: TETHER_CRASH_AT={crash_at})"
        say(f"== Process {number}: {title} ==")
        result = spawn(
            scenario, root, number, step, idempotency=idempotency, crash_at=crash_at, trace=trace
        )
        processes.append(result)
        shown = -1
        for line in result.stdout.splitlines():
            say(line)
            if m := _SEQ_LINE.match(line):
                shown = max(shown, int(m.group(1)))
        expected = -signal.SIGKILL if crash_at is not None else 0
        if result.returncode != expected:
            how = "killed by SIGKILL" if expected else "exit 0"
            raise DemoError(
                f"process {number} ({step}) ended with {result.returncode}, expected {how}:\n"
                + result.stderr.strip()
            )
        view, events = look(scenario, root)
        calls = f"{result.model_calls} model call{'s' if result.model_calls != 1 else ''}"
        if result.killed:
            timeline = Timeline()
            timeline.skip_to([e for e in events if e.seq <= shown])
            for line in timeline.new_lines([e for e in events if e.seq > shown]):
                say(line + "   (saved just before the kill)")
            assert crash is not None
            say(
                f"CRASH: SIGKILL (exit code {result.returncode}) "
                f"{_crash_story(crash.point, events)}; process {number} made {calls}"
            )
        else:
            say(f"process {number} exited with code 0 after {calls}")
        say("")
        if view.status is RunStatus.WAITING_FOR_APPROVAL:
            if decide is None or decided:
                raise DemoError(f"run {scenario.run_id} waits for a decision nobody gives")
            event, tool = record_decision(root, scenario.run_id, decide)
            decided = True
            verb = "approves" if decide.approved else "rejects"
            say(f"== {decide.by} {verb} {tool} ({decide.call_id}); no process runs the run ==")
            timeline = Timeline()
            timeline.names[decide.call_id] = tool
            say(f"  seq {event.seq:<3} {'decision':<15} {timeline.describe(event)}")
            say("")
            continue
        if not result.killed:
            break  # it stopped at a rest: done, failed, or waiting for a person nobody is
        # A killed process is always followed by a fresh one, even when the journal already
        # says the run finished: resuming a finished run must do nothing at all.
    else:
        raise DemoError(f"run {scenario.run_id} did not finish in {max_processes} processes")
    assert view is not None
    path = Path(FileStore(root).path(scenario.run_id))
    return Outcome(
        processes=processes,
        status=view.status.value,
        final_text=view.final_text,
        effects=scenario.count_effects(root),
        model_calls=_count_lines(root / MODEL_CALLS_LOG),
        recorded_model_calls=view.model_calls,
        journal_events=len(events),
        journal_bytes=path.stat().st_size,
        journal_path=path,
    )


def _crash_story(point: str, events: list[AnyEvent]) -> str:
    """What the kill at ``point`` interrupted, naming the tool call it hit."""
    timeline = Timeline()
    tool = "a tool"
    for event in events:
        timeline.describe(event)
        if isinstance(event, (ToolStarted, ToolResult)):
            tool = timeline.names.get(event.call_id, event.call_id)
    return CRASH_MEANING[point].format(tool=tool)


# ---------------------------------------------------------------------------- summaries


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
    """Create ``root`` if needed; refuse one that already holds anything."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise DemoError(f"{root} is not empty; give the demo a new or empty directory")


def print_result(
    summary: DemoSummary, outcome: Outcome, effect_label: str, say: Callable[[str], None]
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
    scenario: Scenario,
    root: str | Path,
    *,
    idempotency: bool,
    crash: Crash | None,
    expected_effects: int,
    decide: Decide | None = None,
    json_out: bool = False,
    stream: TextIO | None = None,
) -> DemoSummary:
    """Run a demo scenario in real child processes under ``root`` and report it.

    Prints the timeline and the result block (or, with ``json_out``, one JSON summary) to
    ``stream`` (stdout).

    Raises:
        DemoError: ``root`` is not empty, or a process failed.
    """
    out = stream or sys.stdout
    say: Callable[[str], None] = (lambda _line: None) if json_out else printer(out)
    root = Path(root)
    prepare_root(root)
    outcome = drive(scenario, root, idempotency=idempotency, decide=decide, crash=crash, echo=say)
    summary = DemoSummary(
        demo=scenario.name,
        run_id=scenario.run_id,
        status=outcome.status,
        effect_name=scenario.effect_name,
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
    if json_out:
        print(json.dumps(summary.as_dict()), file=out, flush=True)
    else:
        print_result(summary, outcome, scenario.effect_label, say)
    return summary
