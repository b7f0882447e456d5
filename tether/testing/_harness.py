"""Crash testing for your own agent: kill it at every crash point, resume it, compare.

A *scenario* describes one agent run and how to read back what it did to the world. It is made
by a factory ``scenario(root: Path) -> Scenario`` that a ``MODULE:NAME`` string points at, so
every child process can rebuild it from scratch; everything the scenario keeps (its fake
services, its side-effect ledger) lives in files under ``root``.

``run_crashtest`` first runs the scenario once without a kill, in fresh child processes, and
records the baseline: the final status and answer, the side-effect ledger, the model calls, and
the crash points each process passes (``TETHER_CRASH_TRACE``). Then, for every one of those
passes, it runs the scenario again from an empty directory with ``TETHER_CRASH_AT=POINT:N``
armed in that process, which dies there with a real ``SIGKILL``; fresh processes resume the run
until it rests. With ``double``, a sample of cases is killed a second time, in the resuming
process. Each case is compared with the baseline:

- *duplicates*: side effects beyond the baseline's count, per ledger key;
- *lost records*: a journal record that was durable after a process ended (or that the killed
  process had acknowledged at its crash point) is missing or changed afterwards;
- *differs*: another final status, final answer, number of model answers in the journal, or a
  side effect missing;
- *extra model calls*: the model is asked again only when a kill falls between its answer and
  the save (``model_answered``), at most once per such kill.

A run that stops as ``needs_attention`` because a kill left an ``escalate``-policy call with an
unknown outcome is the designed behaviour, not a failure, as long as nothing was duplicated: the
case's outcome is ``parked``. A scenario's ``decide`` function may resolve such a call (looking
at its services for evidence, as a person would), and the run then has to finish like the
baseline; the outcome is ``resolved``.

Each child is ``python -m tether.testing MODULE:NAME --root DIR --step start|resume``. Under a
case's directory ``DIR``: ``world/`` is the scenario's root, ``store/`` the run's ``FileStore``,
``model_calls.log`` one line per model answer (written as it happens, so a killed process's calls
count too), ``trace-N.txt`` the crash points process ``N`` passed.

With ``store="postgresql://..."`` the runs live in that database instead, every case (and the
baseline) in a PostgreSQL schema of its own (``crash_<random>_<case number>``, named in the
case's ``schema.txt``), so cases never see each other's runs. Children get ``--schema NAME`` and
the URL in ``TETHER_CRASHTEST_STORE`` (not on their command line, where a password would show)
and open the store with ``store_for``; the harness reads the run and records a person's answers
through the same ``Store`` protocol. A killed child's lease on the run stays live until it runs
out, so children use a short one (``PG_LEASE_TTL``) and a resuming child waits until it can
claim the run. The schemas are dropped when their case is over, unless ``root`` is given: then
they are kept with the cases' directories.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias
from urllib.parse import urlsplit

import anyio
from anyio.from_thread import start_blocking_portal

from .._errors import JournalLockedError, RunNotFoundError
from .._failpoints import POINTS
from .._store_url import is_postgres, store_for
from ..journal import (
    AnyEvent,
    Budgets,
    Decision,
    Escalated,
    FileStore,
    ModelResponse,
    Resolved,
    Store,
    ToolResult,
    ToolStarted,
    verify_file,
)
from ..models import Model, ModelReply, SystemPrompt
from ..supervisor import RunStatus, Supervisor, fold
from ..tools import ToolRegistry

CHILD_TIMEOUT_S = 60.0
"""How long one child process may take to bring the run to a rest."""

MAX_PROCESSES = 12
"""Processes one case may start before it counts as stuck."""

PG_LEASE_TTL = 0.5
"""Seconds a child's lease on a PostgreSQL run lasts: how long a resuming child waits after a
kill before it may take the run over."""

STORE_ENV = "TETHER_CRASHTEST_STORE"
"""The variable that gives children the PostgreSQL URL of the cases' runs."""

_STATUS_MARK = "tether-crashtest-status: "
_ACKNOWLEDGED: dict[str, type[AnyEvent]] = {
    "model_saved": ModelResponse,
    "tool_started": ToolStarted,
    "result_saved": ToolResult,
}
_FAILURES = ("error", "duplicate", "lost", "differs", "extra-calls")


class CrashtestError(Exception):
    """The crash test could not run: a bad target, or a baseline run that failed."""


# ---------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Pending:
    """A tool call the run waits on a person for, as a scenario's ``decide`` function sees it.

    Attributes:
        run_id, call_id, name, input: the call.
        escalated: ``True`` when the call was escalated (its outcome is unknown after a crash,
            the run is ``needs_attention``); ``False`` when it waits for approval.
        reason: why it was escalated (empty for an approval).
    """

    run_id: str
    call_id: str
    name: str
    input: Any
    escalated: bool
    reason: str = ""

    def approve(self, by: str = "crashtest", note: str = "") -> Decision:
        """Approve the call."""
        return Decision(call_id=self.call_id, approved=True, by=by, note=note)

    def reject(self, note: str = "", by: str = "crashtest") -> Decision:
        """Reject the call; the model gets ``note`` as an error result."""
        return Decision(call_id=self.call_id, approved=False, by=by, note=note)

    def succeeded(self, result: Any, by: str = "crashtest", note: str = "") -> Resolved:
        """Resolve an escalated call: it happened, and ``result`` is its result."""
        return Resolved(call_id=self.call_id, outcome="succeeded", result=result, by=by, note=note)

    def retry(self, by: str = "crashtest", note: str = "") -> Resolved:
        """Resolve an escalated call: it did not happen, run it again."""
        return Resolved(call_id=self.call_id, outcome="retry", by=by, note=note)

    def failed(self, note: str, by: str = "crashtest") -> Resolved:
        """Resolve an escalated call: it failed; the model gets ``note`` as an error result."""
        return Resolved(call_id=self.call_id, outcome="failed", by=by, note=note)


Decide: TypeAlias = Callable[[Pending], Decision | Resolved | None]
"""Answers a pending call with a ``Decision`` or ``Resolved`` record, or ``None`` to leave it."""


def approve_all(pending: Pending) -> Decision | None:
    """The default ``decide``: approve every call waiting for approval, resolve no escalation."""
    return None if pending.escalated else pending.approve()


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One agent run to crash-test, made by a factory ``scenario(root: Path) -> Scenario``.

    The factory is called in every child process and in the test's own process, each time with
    the same ``root``: it must be cheap and must not touch the world (build services lazily or
    let them open their files on each call).

    Attributes:
        build: makes the model and the tools for one process. Everything they keep must live
            under ``root``: a killed process keeps nothing in memory.
        prompt: the user's message, or a list of messages.
        ledger: the side effects that really happened, read back from the files under
            ``root``: a ``Counter``/mapping of effect to count, or an iterable of effects (one
            item per occurrence). Reads and other repeatable calls belong outside it.
        run_id, system, budgets: what the run starts with.
        decide: answers the run when it waits for a person (see ``Pending``); by default
            every approval is granted and escalations are left as they are.
    """

    build: Callable[[], tuple[Model, ToolRegistry]]
    prompt: str | Sequence[dict[str, Any]]
    ledger: Callable[[], Mapping[str, int] | Iterable[str]]
    run_id: str = "crashtest"
    system: SystemPrompt = None
    budgets: Budgets | None = None
    decide: Decide = approve_all


ScenarioFactory: TypeAlias = Callable[[Path], Scenario]


def _ledger(scenario: Scenario) -> Counter[str]:
    found = scenario.ledger()
    if isinstance(found, Mapping):
        return Counter({str(k): int(v) for k, v in found.items() if int(v)})
    return Counter(str(item) for item in found)


def load_target(target: str) -> ScenarioFactory:
    """The factory ``MODULE:NAME`` names (``NAME`` may be dotted).

    Raises:
        CrashtestError: the string is malformed, or the module or name cannot be found.
    """
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise CrashtestError(f"expected MODULE:SCENARIO, got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CrashtestError(f"cannot import {module_name!r}: {exc}") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CrashtestError(f"{module_name!r} has no {qualname!r}") from None
    if not callable(obj):
        raise CrashtestError(f"{target} is not a scenario factory (a callable taking a root)")
    factory: ScenarioFactory = obj
    return factory


def _resolve_target(target: str | ScenarioFactory) -> tuple[str, ScenarioFactory, list[str]]:
    """The target as ``MODULE:NAME``, its factory, and the directories a child needs on its
    path to import it."""
    if isinstance(target, str):
        spec, factory = target, load_target(target)
    else:
        module = getattr(target, "__module__", None)
        qualname = getattr(target, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise CrashtestError(
                f"{target!r} cannot be imported by a child process: define the factory at "
                "module level in an importable module, or pass 'MODULE:NAME'"
            )
        spec, factory = f"{module}:{qualname}", target
    module_name = spec.partition(":")[0]
    paths: list[str] = []
    mod = sys.modules.get(module_name)
    file = getattr(mod, "__file__", None)
    if file:
        base = Path(file).resolve().parent
        if Path(file).name == "__init__.py":
            base = base.parent
        for _ in range(module_name.count(".")):
            base = base.parent
        paths.append(str(base))
    paths.append(os.getcwd())
    paths.append(str(Path(__file__).resolve().parents[2]))  # where tether itself is
    return spec, factory, paths


def _check_scenario(spec: str, factory: ScenarioFactory) -> None:
    """Make the scenario once, in a scratch directory, so that a broken one is reported as
    such (exit 2 on the command line), not as an unsafe agent.

    Raises:
        CrashtestError: the factory raises or returns something else than a ``Scenario``,
            ``build`` or ``ledger`` is not callable, ``build()`` raises or does not return
            ``(model, tools)``, or ``ledger()`` raises.
    """
    with tempfile.TemporaryDirectory(prefix="tether-crashtest-check-") as scratch:
        try:
            scenario = factory(Path(scratch))
        except Exception as exc:
            raise CrashtestError(
                f"the scenario factory {spec} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(scenario, Scenario):
            raise CrashtestError(
                f"the scenario factory {spec} returned {type(scenario).__name__}, not a "
                "tether.testing.Scenario"
            )
        for name in ("build", "ledger"):
            if not callable(getattr(scenario, name)):
                kind = type(getattr(scenario, name)).__name__
                raise CrashtestError(
                    f"Scenario.{name} must be a function (called in each process), not a {kind}"
                )
        try:
            built = scenario.build()
        except Exception as exc:
            raise CrashtestError(
                f"the scenario's build() raised {type(exc).__name__}: {exc}"
            ) from exc
        if not (
            isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], ToolRegistry)
        ):
            raise CrashtestError(
                "the scenario's build() must return (model, tools), a model and a ToolRegistry"
            )
        try:
            _ledger(scenario)
        except Exception as exc:
            raise CrashtestError(
                f"the scenario's ledger() raised {type(exc).__name__}: {exc}"
            ) from exc


# ---------------------------------------------------------------------------- child side


class _CountingModel:
    """Wraps a scenario's model: one line per answer appended to a log, before it is returned
    (so the answer is counted even if the process is killed right after)."""

    def __init__(self, inner: Model, log: Path) -> None:
        self._inner = inner
        self._log = log

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def params(self) -> dict[str, Any]:
        return self._inner.params

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> ModelReply:
        reply = await self._inner(system=system, messages=messages, tools=tools)
        fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return reply


def child_main(argv: Sequence[str]) -> int:
    """``python -m tether.testing MODULE:NAME --root DIR --step start|resume
    [--store URL] [--schema NAME]``.

    Runs one process of a case: ``start`` creates the run and drives it, ``resume`` lets a
    ``Supervisor`` resume unfinished runs on entry. Either waits until the run rests and
    prints its status as the last line. Exit 0 when the run rests, 1 otherwise.

    The run lives in ``DIR/store`` (a ``FileStore``), or with ``--store`` (by default the
    ``TETHER_CRASHTEST_STORE`` variable) in that PostgreSQL database, in schema ``NAME``.
    """
    parser = argparse.ArgumentParser(prog="python -m tether.testing")
    parser.add_argument("target", metavar="MODULE:SCENARIO")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--step", required=True, choices=("start", "resume"))
    parser.add_argument("--store", metavar="URL", default=os.environ.get(STORE_ENV) or None)
    parser.add_argument("--schema", metavar="NAME", default="tether")
    args = parser.parse_args(list(argv))
    if args.store is not None and not is_postgres(args.store):
        parser.error(f"--store: expected a postgresql:// URL, got {args.store!r}")
    factory = load_target(args.target)
    root: Path = args.root
    (root / "world").mkdir(parents=True, exist_ok=True)
    scenario = factory(root / "world")
    if args.store is None:
        store = store_for(str(root / "store"))
    else:
        store = store_for(args.store, schema=args.schema, lease_ttl=PG_LEASE_TTL)
    status = anyio.run(_child, scenario, root, store, args.step)
    print(_STATUS_MARK + json.dumps(status), flush=True)
    return 0 if status["status"] != RunStatus.RUNNING.value else 1


async def _claimable(store: Store, run_id: str) -> None:
    """Wait until run ``run_id`` can be claimed (or does not exist).

    A killed process leaves its lease on a PostgreSQL run live until it runs out; a
    ``Supervisor`` entered before that would see the run as another worker's and not resume it.
    """
    with anyio.fail_after(CHILD_TIMEOUT_S):
        while True:
            try:
                journal = await store.open(run_id)
            except JournalLockedError:
                await anyio.sleep(0.05)
                continue
            except RunNotFoundError:
                return
            await journal.aclose()
            return


async def _child(scenario: Scenario, root: Path, store: Store, step: str) -> dict[str, Any]:
    model, tools = scenario.build()
    counting = _CountingModel(model, root / "model_calls.log")
    run_id = scenario.run_id
    async with store:
        if step == "resume" and not isinstance(store, FileStore):
            await _claimable(store, run_id)
        async with Supervisor(store, model=counting, tools=tools) as sup:
            if step == "start":
                await sup.start(
                    run_id, scenario.prompt, system=scenario.system, budgets=scenario.budgets
                )
            status = await sup.wait(run_id, timeout=CHILD_TIMEOUT_S)
            view = await sup.inspect(run_id)
    return {"status": status.value, "reason": view.reason, "pending": list(view.pending)}


# ---------------------------------------------------------------------------- one case


@dataclass(frozen=True)
class Kill:
    """Kill process number ``process`` of a case the ``n``-th time it passes ``point``."""

    process: int
    point: str
    n: int = 1

    def __str__(self) -> str:
        return f"p{self.process} {self.point}:{self.n}"


@dataclass
class _Process:
    number: int
    step: str
    kill: Kill | None
    returncode: int
    points: list[str]
    status: dict[str, Any] | None
    stderr: str


@dataclass
class _Run:
    """Where a case (or the baseline) left the run."""

    processes: list[_Process]
    status: str
    reason: str
    final_text: str | None
    ledger: Counter[str]
    model_calls: int
    recorded_model_calls: int
    events: int
    escalations: int
    parked: bool
    decisions: int
    problems: list[str]  # errors and lost records found while driving
    lost: int


def _read_events(store: Path, run_id: str) -> list[AnyEvent]:
    """The run's durable events, read without a lock (no process runs the run meanwhile)."""
    path = FileStore(store).path(run_id)
    if not os.path.exists(path):
        return []
    return list(verify_file(path).events)


def _record(store: Path, run_id: str, records: list[Decision | Resolved]) -> None:
    """Append a person's records to the run's journal under its lock, as a support tool
    would; no process drives the run meanwhile."""

    async def append() -> None:
        async with FileStore(store) as fs:
            await _append(fs, run_id, records)

    anyio.run(append)


async def _append(store: Store, run_id: str, records: list[Decision | Resolved]) -> None:
    journal = await store.open(run_id)
    async with journal:
        await journal.append(records)


class _CaseStore(Protocol):
    """Where a case's run lives, as the harness sees it between two processes."""

    def read(self, run_id: str) -> list[AnyEvent]:
        """The run's durable events (none before it exists)."""
        ...

    def record(self, run_id: str, records: list[Decision | Resolved]) -> None:
        """Append a person's records to the run, holding it as a worker would."""
        ...


@dataclass(frozen=True)
class _FileCase:
    """The case's ``FileStore`` in ``DIR/store``."""

    root: Path

    def read(self, run_id: str) -> list[AnyEvent]:
        return _read_events(self.root, run_id)

    def record(self, run_id: str, records: list[Decision | Resolved]) -> None:
        _record(self.root, run_id, records)


class _PostgresCase:
    """The case's PostgreSQL schema, through a ``Store`` kept open on a thread of its own."""

    def __init__(self, store: Store, call: Callable[..., Any]) -> None:
        self._store = store
        self._call = call

    def read(self, run_id: str) -> list[AnyEvent]:
        try:
            events: list[AnyEvent] = self._call(self._store.read, run_id)
        except RunNotFoundError:
            return []
        return events

    def record(self, run_id: str, records: list[Decision | Resolved]) -> None:
        self._call(_append, self._store, run_id, records)


@contextmanager
def _postgres_case(url: str, schema: str, *, keep: bool) -> Iterator[_PostgresCase]:
    """Open schema ``schema`` of the database at ``url`` (created if missing); drop it on the
    way out unless ``keep``."""
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        store = store_for(url, schema=schema)
        try:
            stack.enter_context(portal.wrap_async_context_manager(store))
        except Exception as exc:  # not reachable, refused, no right to create the schema
            raise CrashtestError(
                f"cannot use the store {redact_url(url)}: {type(exc).__name__}: {exc}"
            ) from exc
        if not keep:
            stack.callback(portal.call, _drop_schema, store)
        yield _PostgresCase(store, portal.call)


async def _drop_schema(store: Store) -> None:
    from ..postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    await store.pool.execute(f"DROP SCHEMA IF EXISTS {store.sql.schema} CASCADE")


def _pending(run_id: str, events: list[AnyEvent], ids: Sequence[str]) -> list[Pending]:
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


def count_lines(path: Path) -> int:
    """Lines in a log file (0 if it does not exist yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class _Target:
    spec: str
    factory: ScenarioFactory
    paths: list[str]
    pycache: str
    store: str | None = None  # a postgresql:// URL; None: a FileStore in each case
    keep: bool = False  # keep the cases' schemas

    def env(self, kill: Kill | None, trace: Path) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TETHER_CRASH_") and k != STORE_ENV
        }
        if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
            # Dozens of children would each compile everything again; let them share a
            # bytecode cache in the crash test's own directory instead of the source tree.
            env.setdefault("PYTHONPYCACHEPREFIX", self.pycache)
        paths = [*self.paths, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
        env["PYTHONIOENCODING"] = "utf-8"
        env["TETHER_CRASH_TRACE"] = str(trace)
        if kill is not None:
            env["TETHER_CRASH_AT"] = f"{kill.point}:{kill.n}"
        if self.store is not None:
            env[STORE_ENV] = self.store
        return env

    @contextmanager
    def case_store(self, case: Path, schema: str | None) -> Iterator[_CaseStore]:
        """How the harness reaches the run of the case in directory ``case``."""
        if self.store is None or schema is None:
            yield _FileCase(case / "store")
            return
        (case / "schema.txt").write_text(schema + "\n", encoding="utf-8")
        with _postgres_case(self.store, schema, keep=self.keep) as store:
            yield store


def _spawn(
    target: _Target, case: Path, number: int, step: str, kill: Kill | None, schema: str | None
) -> _Process:
    trace = case / f"trace-{number}.txt"
    trace.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tether.testing", target.spec, "--root", str(case)]
    cmd += ["--step", step]
    if schema is not None:
        cmd += ["--schema", schema]
    try:
        proc = subprocess.run(
            cmd,
            env=target.env(kill, trace),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CHILD_TIMEOUT_S + 30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _Process(number, step, kill, -1, [], None, "timed out")
    stdout = proc.stdout.decode("utf-8", "replace")
    status = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(_STATUS_MARK):
            status = json.loads(line[len(_STATUS_MARK) :])
            break
    points = trace.read_text(encoding="utf-8").split() if trace.exists() else []
    stderr = proc.stderr.decode("utf-8", "replace").strip()
    return _Process(number, step, kill, proc.returncode, points, status, stderr)


def _drive(target: _Target, case: Path, kills: Sequence[Kill], schema: str | None = None) -> _Run:
    """Run the scenario under ``case`` (new) to a rest, killing processes as ``kills`` say;
    its run lives in schema ``schema`` of the target's PostgreSQL store if it has one."""
    world = case / "world"
    world.mkdir(parents=True)
    with target.case_store(case, schema) as store:
        return _drive_in(target, case, kills, schema, store)


def _drive_in(
    target: _Target, case: Path, kills: Sequence[Kill], schema: str | None, store: _CaseStore
) -> _Run:
    world = case / "world"
    scenario = target.factory(world)
    run_id = scenario.run_id
    armed = {k.process: k for k in kills}
    processes: list[_Process] = []
    problems: list[str] = []
    snapshots: list[list[AnyEvent]] = []
    decisions = 0
    lost = 0
    status, reason = "", ""
    for number in range(1, MAX_PROCESSES + 1):
        kill = armed.get(number)
        before = store.read(run_id)
        step = "start" if number == 1 else "resume"
        proc = _spawn(target, case, number, step, kill, schema)
        processes.append(proc)
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
        after = store.read(run_id)
        snapshots.append(after)
        if kill is not None:
            record = _ACKNOWLEDGED.get(kill.point)
            new = [e for e in after if e.seq > (before[-1].seq if before else -1)]
            if record is not None and sum(isinstance(e, record) for e in new) < kill.n:
                lost += 1
                problems.append(
                    f"lost: the {record.__name__} record process {number} saved before "
                    f"{kill.point}:{kill.n} is not in the journal"
                )
            continue  # a killed process is always followed by a fresh one
        assert proc.status is not None
        status, reason = proc.status["status"], proc.status["reason"]
        if status in (RunStatus.WAITING_FOR_APPROVAL.value, RunStatus.NEEDS_ATTENTION.value):
            answers = [scenario.decide(p) for p in _pending(run_id, after, proc.status["pending"])]
            records = [a for a in answers if a is not None]
            if records:
                store.record(run_id, records)
                decisions += len(records)
                snapshots.append(store.read(run_id))
                continue
        break
    else:
        problems.append(f"the run did not come to a rest in {MAX_PROCESSES} processes")
        status = "error"
    events = store.read(run_id)
    by_seq = {e.seq: e for e in events}
    for snapshot in snapshots:
        changed = [e.seq for e in snapshot if by_seq.get(e.seq) != e]
        if changed:
            lost += len(changed)
            problems.append(f"lost: records {changed} were durable once and are gone or changed")
    state = fold(events)
    parked = status == RunStatus.NEEDS_ATTENTION.value and any(
        c.escalated for c in state.calls.values()
    )
    return _Run(
        processes=processes,
        status=status,
        reason=reason,
        final_text=state.final_text,
        ledger=_ledger(scenario),
        model_calls=count_lines(case / "model_calls.log"),
        recorded_model_calls=state.model_calls,
        events=len(events),
        escalations=sum(isinstance(e, Escalated) for e in events),
        parked=parked,
        decisions=decisions,
        problems=problems,
        lost=lost,
    )


# ---------------------------------------------------------------------------- report


@dataclass
class CaseResult:
    """One crash case: where its processes were killed and how the run ended compared with
    the baseline.

    Attributes:
        kills: the kills, in order (two with ``double``).
        outcome: ``ok`` (ended as the baseline did), ``resolved`` (a call escalated after the
            kill was resolved by the scenario's ``decide`` and the run ended as the baseline
            did), ``parked`` (an escalated call left the run ``needs_attention``, nothing was
            duplicated), or a failure: ``error`` (a process failed or was not killed as armed),
            ``duplicate``, ``lost``, ``differs``, ``extra-calls``.
        extra_model_calls: model calls beyond the baseline's.
        duplicates: side effects beyond the baseline's count, summed over the ledger's keys.
        lost_records: durable journal records that went missing or changed.
        problems: what went wrong, one line each.
    """

    kills: tuple[Kill, ...]
    outcome: str
    status: str
    final_text: str | None
    extra_model_calls: int
    duplicates: int
    lost_records: int
    ledger: dict[str, int]
    processes: list[int]
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.outcome in _FAILURES

    @property
    def label(self) -> str:
        return " then ".join(str(k) for k in self.kills)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kills": [{"process": k.process, "point": k.point, "n": k.n} for k in self.kills],
            "outcome": self.outcome,
            "status": self.status,
            "final_text": self.final_text,
            "extra_model_calls": self.extra_model_calls,
            "duplicates": self.duplicates,
            "lost_records": self.lost_records,
            "ledger": self.ledger,
            "processes": self.processes,
            "problems": self.problems,
        }


@dataclass
class Baseline:
    """The uninterrupted run every case is compared with."""

    status: str
    final_text: str | None
    ledger: dict[str, int]
    model_calls: int
    processes: int
    decisions: int
    points: list[list[str]]  # the crash points each process passed, in order


@dataclass
class Report:
    """What ``run_crashtest`` found. ``ok`` is what a test asserts."""

    target: str
    baseline: Baseline
    cases: list[CaseResult]
    seconds: float
    store: str | None = None  # the PostgreSQL database the runs lived in (no password)

    @property
    def points(self) -> int:
        """Crash points exercised: cases with one kill."""
        return sum(1 for c in self.cases if len(c.kills) == 1)

    @property
    def double_kills(self) -> int:
        return sum(1 for c in self.cases if len(c.kills) > 1)

    @property
    def duplicates(self) -> int:
        return sum(c.duplicates for c in self.cases)

    @property
    def lost_records(self) -> int:
        return sum(c.lost_records for c in self.cases)

    @property
    def differing(self) -> int:
        """Cases whose run ended otherwise than the baseline (status, answer, effects)."""
        return sum(1 for c in self.cases if c.outcome == "differs")

    @property
    def errors(self) -> int:
        return sum(1 for c in self.cases if c.outcome == "error")

    @property
    def extra_model_calls(self) -> int:
        return sum(max(0, c.extra_model_calls) for c in self.cases)

    @property
    def extra_calls_elsewhere(self) -> int:
        """Extra model calls not explained by a kill at ``model_answered`` (should be 0)."""
        return sum(1 for c in self.cases if c.outcome == "extra-calls")

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)

    @property
    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if c.failed]

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self) -> str:
        """One line per case: kill, outcome, extra model calls, duplicates, problems."""
        width = max([len("kill"), *(len(c.label) for c in self.cases)])
        lines = [f"{'kill':<{width}}  {'outcome':<11}  extra calls  duplicates  notes"]
        for c in self.cases:
            note = "; ".join(c.problems)
            if not note and c.outcome == "parked":
                note = "needs_attention: an escalated call is left for a person"
            elif not note and c.outcome == "resolved":
                note = "escalated, then resolved by the scenario's decide()"
            lines.append(
                f"{c.label:<{width}}  {c.outcome:<11}  {c.extra_model_calls:>11}  "
                f"{c.duplicates:>10}  {note}".rstrip()
            )
        return "\n".join(lines)

    def summary(self) -> str:
        b = self.baseline
        effects = ", ".join(f"{k} x{v}" for k, v in sorted(b.ledger.items())) or "none"
        outcomes = ", ".join(
            f"{self.count(o)} {o}"
            for o in ("ok", "resolved", "parked", *_FAILURES)
            if self.count(o) or o in ("ok", "duplicate", "lost", "differs")
        )
        double = f" + {self.double_kills} double kills" if self.double_kills else ""
        return "\n".join(
            [
                f"baseline: {b.status} in {b.processes} process(es), {b.model_calls} model calls, "
                f"{b.decisions} decision(s); side effects: {effects}",
                f"crash points exercised: {self.points}{double} in {self.seconds:.1f} s",
                f"outcomes: {outcomes}",
                f"duplicates: {self.duplicates}  lost records: {self.lost_records}  "
                f"differing final answers: {self.differing}  extra model calls: "
                f"{self.extra_model_calls} (outside model_answered: "
                f"{self.extra_calls_elsewhere})",
                "result: " + ("crash-safe" if self.ok else f"NOT crash-safe ({self._why()})"),
            ]
        )

    def _why(self) -> str:
        counts = Counter(c.outcome for c in self.failures)
        return ", ".join(f"{n} {o}" for o, n in counts.items())

    def text(self) -> str:
        where = f" on {self.store}" if self.store else ""
        return f"crashtest {self.target}{where}\n\n{self.table()}\n\n{self.summary()}"

    def as_dict(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "target": self.target,
            "store": self.store,
            "ok": self.ok,
            "points": self.points,
            "double_kills": self.double_kills,
            "duplicates": self.duplicates,
            "lost_records": self.lost_records,
            "differing": self.differing,
            "errors": self.errors,
            "extra_model_calls": self.extra_model_calls,
            "extra_calls_elsewhere": self.extra_calls_elsewhere,
            "seconds": round(self.seconds, 3),
            "baseline": {
                "status": b.status,
                "final_text": b.final_text,
                "ledger": b.ledger,
                "model_calls": b.model_calls,
                "processes": b.processes,
                "decisions": b.decisions,
                "points": b.points,
            },
            "cases": [c.as_dict() for c in self.cases],
        }


def redact_url(url: str) -> str:
    """``url`` without its password (or anything past the host when it cannot be parsed)."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.partition("://")[0] + "://..."
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def _judge(kills: tuple[Kill, ...], base: _Run, got: _Run) -> CaseResult:
    duplicates = sum(max(0, n - base.ledger[k]) for k, n in got.ledger.items())
    missing = sum(max(0, n - got.ledger[k]) for k, n in base.ledger.items())
    extra = got.model_calls - base.model_calls
    allowed = sum(1 for k in kills if k.point == "model_answered")
    problems = list(got.problems)
    differs: list[str] = []
    if got.status != "error" and not got.parked:
        if got.status != base.status:
            differs.append(f"status {got.status!r}, baseline {base.status!r}")
        if got.final_text != base.final_text:
            differs.append(f"final answer {got.final_text!r}, baseline {base.final_text!r}")
        if got.recorded_model_calls != base.recorded_model_calls:
            differs.append(
                f"{got.recorded_model_calls} model answers in the journal, "
                f"baseline {base.recorded_model_calls}"
            )
        if missing:
            differs.append(f"{missing} side effect(s) missing: {dict(got.ledger)}")
        if extra < 0:
            differs.append(f"{-extra} model call(s) fewer than the baseline")
    if duplicates:
        problems.append(f"{duplicates} duplicate side effect(s): {dict(got.ledger)}")
    problems += differs
    too_many = got.status != "error" and extra > allowed
    if too_many:
        problems.append(f"{extra} extra model call(s), at most {allowed} expected")
    if got.status == "error":
        outcome = "error"
    elif duplicates:
        outcome = "duplicate"
    elif got.lost:
        outcome = "lost"
    elif differs:
        outcome = "differs"
    elif too_many:
        outcome = "extra-calls"
    elif got.parked:
        outcome = "parked"
    elif got.escalations:
        outcome = "resolved"
    else:
        outcome = "ok"
    return CaseResult(
        kills=kills,
        outcome=outcome,
        status=got.status,
        final_text=got.final_text,
        extra_model_calls=extra,
        duplicates=duplicates,
        lost_records=got.lost,
        ledger=dict(got.ledger),
        processes=[p.returncode for p in got.processes],
        problems=problems,
    )


def _kills_of(points_per_process: list[list[str]]) -> list[Kill]:
    """One kill per pass of a crash point, in the order the run passes them."""
    kills = []
    for number, points in enumerate(points_per_process, start=1):
        seen: Counter[str] = Counter()
        for point in points:
            seen[point] += 1
            kills.append(Kill(number, point, seen[point]))
    return kills


def _second_kill(first: Kill, run: _Run) -> Kill | None:
    """A kill at a point the process resuming after ``first`` passes, half-way through."""
    if len(run.processes) <= first.process:
        return None
    after = run.processes[first.process]  # the process right after the killed one
    if not after.points:
        return None
    index = len(after.points) // 2
    point = after.points[index]
    return Kill(first.process + 1, point, after.points[: index + 1].count(point))


def _sample(items: list[tuple[Kill, Kill]], size: int) -> list[tuple[Kill, Kill]]:
    if size >= len(items):
        return list(items)
    step = len(items) / size
    return [items[int(i * step)] for i in range(size)]


def run_crashtest(
    target: str | ScenarioFactory,
    *,
    double: bool | int = False,
    workers: int = 2,
    points: Iterable[str] | None = None,
    root: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
    store: str | None = None,
    on_case: Callable[[int, int, str], None] | None = None,
) -> Report:
    """Crash-test a scenario: kill it at every crash point it passes, resume, compare.

    Args:
        target: ``"MODULE:NAME"`` or the factory itself (defined at module level in an
            importable module): ``factory(root: Path) -> Scenario``.
        double: also kill the resuming process, half-way through, for a sample of the cases:
            ``True`` for 6 of them, or the sample size.
        workers: cases run at the same time (each in its own directory).
        points: kill only at these crash points (``POINTS`` names); every point by default.
        root: where the cases' directories go (kept afterwards, with their PostgreSQL schemas);
            a temporary directory that is removed afterwards by default.
        progress: called with a line for each case that finished.
        on_case: called with ``(done, total, label)`` when the baseline has finished
            (``done`` 0) and each time a case finishes, ``label`` naming its kill points: what
            a progress display needs.
        store: a ``postgresql://`` URL: run every case in that database instead of a
            ``FileStore`` in its directory, each in a schema of its own, ``crash_<random>_<n>``
            (``n`` is 0 for the baseline; the case's ``schema.txt`` names it). The schemas are
            dropped as each case ends, unless ``root`` is given. Needs ``asyncpg``.

    Raises:
        CrashtestError: a bad target or store, or the uninterrupted baseline run failed.
    """
    started = time.monotonic()
    unknown = sorted(set(points or ()) - set(POINTS))
    if unknown:
        raise CrashtestError(f"unknown crash points {unknown}; known: {', '.join(POINTS)}")
    if store is not None:
        if not is_postgres(store):
            raise CrashtestError(f"store: expected a postgresql:// URL, got {redact_url(store)!r}")
        if importlib.util.find_spec("asyncpg") is None:
            raise CrashtestError("a PostgreSQL store needs asyncpg: pip install 'tether[postgres]'")
    spec, factory, paths = _resolve_target(target)
    if root is not None and Path(root).exists() and any(Path(root).iterdir()):
        raise CrashtestError(f"--root {root} is not empty: give a new or empty directory")
    _check_scenario(spec, factory)
    say = progress or (lambda _line: None)
    tag = secrets.token_hex(4)

    def schema(number: int) -> str | None:
        return None if store is None else f"crash_{tag}_{number}"

    with tempfile.TemporaryDirectory(prefix="tether-crashtest-") as tmp:
        tgt = _Target(
            spec, factory, paths, str(Path(tmp) / "pycache"), store=store, keep=root is not None
        )
        base_dir = Path(root) if root is not None else Path(tmp)
        base_dir.mkdir(parents=True, exist_ok=True)
        base = _drive(tgt, base_dir / "baseline", [], schema(0))
        if base.status == "error" or base.lost:
            raise CrashtestError(f"the baseline run failed: {'; '.join(base.problems)}")
        say(f"baseline: {base.status}, {base.model_calls} model calls, {dict(base.ledger)}")
        kills = _kills_of([p.points for p in base.processes])
        if points is not None:
            wanted = set(points)
            kills = [k for k in kills if k.point in wanted]
        size = 6 if double is True else int(double)
        total = len(kills)  # the double kills are added once they are chosen
        finished = 0
        lock = threading.Lock()
        if on_case is not None:
            on_case(0, total, "baseline")

        def one(number: int, kills: tuple[Kill, ...]) -> tuple[CaseResult, _Run]:
            nonlocal finished
            name = "-".join(f"p{k.process}-{k.point}-{k.n}" for k in kills)
            got = _drive(tgt, base_dir / name, kills, schema(number))
            result = _judge(kills, base, got)
            say(f"{result.label}: {result.outcome}")
            with lock:
                finished += 1
                if on_case is not None:
                    on_case(finished, total, result.label)
            return result, got

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            numbers = range(1, len(kills) + 1)
            singles = list(pool.map(one, numbers, [(k,) for k in kills]))
            cases = [r for r, _ in singles]
            if size > 0:
                runs = {k: run for k, (_, run) in zip(kills, singles, strict=True)}
                pairs = [(k, _second_kill(k, runs[k])) for k in kills]
                doubles = _sample([(k, s) for k, s in pairs if s is not None], size)
                total += len(doubles)
                numbers = range(len(kills) + 1, len(kills) + 1 + len(doubles))
                cases += [r for r, _ in pool.map(one, numbers, doubles)]
    baseline = Baseline(
        status=base.status,
        final_text=base.final_text,
        ledger=dict(base.ledger),
        model_calls=base.model_calls,
        processes=len(base.processes),
        decisions=base.decisions,
        points=[p.points for p in base.processes],
    )
    where = redact_url(store) if store is not None else None
    return Report(spec, baseline, cases, time.monotonic() - started, store=where)


def assert_crash_safe(
    target: str | ScenarioFactory,
    *,
    double: bool | int = False,
    workers: int = 2,
    points: Iterable[str] | None = None,
    min_points: int = 1,
    root: str | os.PathLike[str] | None = None,
    store: str | None = None,
) -> Report:
    """``run_crashtest``, then raise ``AssertionError`` with the report if any case failed or
    fewer than ``min_points`` crash points were exercised. Returns the report.

    ``store`` (a ``postgresql://`` URL) runs the cases in that database, as ``run_crashtest``
    says."""
    report = run_crashtest(
        target, double=double, workers=workers, points=points, root=root, store=store
    )
    if not report.ok or report.points < min_points:
        raise AssertionError(report.text())
    return report
