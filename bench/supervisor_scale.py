"""Many runs in one process: tether's Supervisor next to the seeds' SQLite design and frameworks.

Run ``python bench/supervisor_scale.py [--quick] [--dir DIR] [--out FILE] [--png FILE]``.

Every system runs the same scripted agent: five model answers (``tool_use`` A, B, C, D, then a
final text), so nine steps per run (five model calls, four tool calls), each tool returning a
small dict, with a model latency of 0 or 50 ms (a sleep before the scripted answer). All runs
of a case start at once in one process and the case ends when every run has finished. Each case
runs in a fresh child process, so its peak RSS and descriptor counts are its own.

Where a case is compared (up to ``--baseline-max`` runs), the cases of that point run
``--repeat`` times (default 3) in turn (tether, tether-nosync, sqlite, langgraph, dbos,
tether, ...), and each reports its median try: this machine drifts by tens of percent over
minutes, and alternating spreads the drift over every system instead of onto whichever ran
last.

What is compared:

- ``tether``: ``Supervisor`` over a ``FileStore`` (redaction off, no sweeper); one journal per
  run, every record ``fdatasync``'d before the run goes on.
- ``sqlite``: the seeds' design: one SQLite database (WAL, ``synchronous=FULL``), one table
  ``events(run_id, seq, kind, payload, PRIMARY KEY (run_id, seq))``, one row and one commit per
  event, written from a pool of 16 threads (one connection each), as many threads as tether's
  store uses for its syncs; one asyncio task per run.
- ``langgraph``: a two-node ``StateGraph`` (model, tools) checkpointed after every step by
  ``AsyncSqliteSaver`` in one database (its own settings: WAL, SQLite's default
  ``synchronous``), invoked with ``durability="sync"`` so that a step is saved before the next
  starts, as tether and DBOS do.
- ``tether-nosync``: the same as ``tether`` with every ``fdatasync``, ``fsync`` and directory
  sync replaced by nothing (through the ``FileOps`` seam, so on the writer threads even where
  ``tether`` appends through ``io_uring``). Not durable: it measures how fast the
  supervisor goes when the disk costs nothing, the CPU-bound ceiling of the ``tether`` case on
  the machine at hand.
- ``dbos``: a DBOS workflow whose model and tool calls are ``@DBOS.step``s, with DBOS's system
  database on SQLite (its own settings).

LangGraph and DBOS are imported only when installed (``pip install langgraph
langgraph-checkpoint-sqlite aiosqlite dbos``); a case whose package is missing is recorded as
skipped. The plot needs matplotlib, also optional.

Reported per case: wall time, steps/s, fsyncs/s (tether: ``FileStore.syncs``, the syncs of appends
plus a file and a directory sync per run created; not counted for the others), peak RSS
(``ru_maxrss``), the RSS above the case's starting point per run in flight when the most runs were
in flight, and the most descriptors open at once. The ``parked`` cases start runs whose first tool
needs approval, wait until every run waits for a person, and measure what the parked runs hold: RSS
and descriptors (started in batches, so that transient memory stays small), and in a separate
process the Python heap they retain (``tracemalloc``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import json
import operator
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import _machine
import anyio
from _machine import scratch_dir

import tether
from tether.models import SystemPrompt
from tether.testing import FaultyFileOps

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "supervisor_scale.json"
DEFAULT_PNG = REPO_ROOT / "bench" / "results" / "supervisor_scale.png"

KiB = 1024
MODEL_CALLS = 5
TOOL_CALLS = 4
STEPS = MODEL_CALLS + TOOL_CALLS
LATENCIES_MS = (0, 50)
SQLITE_THREADS = 16
PARK_BATCH = 200
CASE_TIMEOUT = 900.0
TOOL_NAMES = ("tool_a", "tool_b", "tool_c", "tool_d")

Kind = Literal["tether", "tether-nosync", "sqlite", "langgraph", "dbos", "parked", "parked-heap"]
OPTIONAL_PACKAGES: dict[str, tuple[str, ...]] = {
    "langgraph": ("langgraph.graph", "langgraph.checkpoint.sqlite.aio", "aiosqlite"),
    "dbos": ("dbos",),
}


# --- the agent -----------------------------------------------------------------------------------


def script(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    """Answer ``i``: a call of tool ``i`` for the first four answers, then the final text."""
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step < TOOL_CALLS:
        name = TOOL_NAMES[step]
        return [tether.ScriptedModel.tool_use(f"toolu_{step}", name, {"item": f"i{step}"})]
    return "all four tools answered"


class SlowModel:
    """A ``tether.Model`` that sleeps ``latency`` seconds, then answers as a ``ScriptedModel``."""

    def __init__(self, latency: float) -> None:
        self._inner = tether.ScriptedModel(script, name="scripted-bench")
        self._latency = latency

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def params(self) -> dict[str, Any]:
        return {**self._inner.params, "latency_s": self._latency}

    @property
    def calls(self) -> int:
        return self._inner.calls

    async def __call__(
        self, *, system: SystemPrompt, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tether.ModelReply:
        if self._latency > 0:
            await anyio.sleep(self._latency)
        return await self._inner(system=system, messages=messages, tools=tools)


async def trivial_tool(item: str) -> dict[str, Any]:
    """What every tool does: answer at once with a small dict."""
    return {"item": item, "ok": True, "n": 1}


def tether_tools(*, approval_first: bool) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()
    for i, name in enumerate(TOOL_NAMES):

        async def tool(item: str) -> dict[str, Any]:
            """Look something up."""
            return await trivial_tool(item)

        tool.__name__ = name
        tools.tool(name=name, policy="rerun", approval=approval_first and i == 0)(tool)
    return tools


def tool_uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def tool_result_message(results: list[tuple[str, Any]]) -> dict[str, Any]:
    blocks = [
        {"type": "tool_result", "tool_use_id": call_id, "content": json.dumps(content)}
        for call_id, content in results
    ]
    return {"role": "user", "content": blocks}


# --- sampling ------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KiB
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB  # KiB on Linux


@dataclass
class Sampler:
    """Samples RSS, open descriptors and runs in flight on a thread, every ``interval`` s."""

    interval: float = 0.01
    in_flight: int = 0
    max_fds: int = 0
    max_rss: int = 0
    busiest: int = 0
    rss_at_busiest: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        rss, fds, n = rss_bytes(), open_fds(), self.in_flight
        self.max_rss, self.max_fds = max(self.max_rss, rss), max(self.max_fds, fds)
        if n > self.busiest or (n == self.busiest and rss > self.rss_at_busiest):
            self.busiest, self.rss_at_busiest = n, rss

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.sample()


@dataclass
class CaseResult:
    """What one child process measured."""

    kind: str
    latency_ms: int
    runs: int
    ok: bool = True
    skipped: str | None = None
    wall_s: float = 0.0
    steps: int = 0
    fsyncs: int | None = None
    completed: int = 0
    baseline_rss: int = 0
    peak_rss: int = 0
    sampled_peak_rss: int = 0
    busiest: int = 0
    rss_at_busiest: int = 0
    baseline_fds: int = 0
    peak_fds: int = 0
    parked_rss: int | None = None
    parked_fds: int | None = None
    heap_before: int | None = None
    heap_parked: int | None = None
    samples: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.latency_ms}ms/n{self.runs}"

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def fsyncs_per_s(self) -> float | None:
        return None if self.fsyncs is None or self.wall_s <= 0 else self.fsyncs / self.wall_s

    @property
    def rss_per_active_run(self) -> float | None:
        if self.busiest <= 0:
            return None
        return (self.rss_at_busiest - self.baseline_rss) / self.busiest

    @property
    def rss_per_parked_run(self) -> float | None:
        if self.parked_rss is None or self.runs <= 0:
            return None
        return (self.parked_rss - self.baseline_rss) / self.runs

    @property
    def heap_per_parked_run(self) -> float | None:
        if self.heap_parked is None or self.heap_before is None or self.runs <= 0:
            return None
        return (self.heap_parked - self.heap_before) / self.runs

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["key"] = self.key
        out["steps_per_s"] = round(self.steps_per_s, 1)
        fps = self.fsyncs_per_s
        out["fsyncs_per_s"] = None if fps is None else round(fps, 1)
        for name in ("rss_per_active_run", "rss_per_parked_run", "heap_per_parked_run"):
            value = getattr(self, name)
            out[name] = None if value is None else round(value, 1)
        return out


def settle() -> tuple[int, int]:
    gc.collect()
    return rss_bytes(), open_fds()


async def fan_out(
    runs: int, one: Callable[[int], Awaitable[None]], sampler: Sampler, batch: int | None = None
) -> None:
    """Run ``one(i)`` for every run, all at once (or ``batch`` at a time), counting in flight."""

    async def tracked(i: int) -> None:
        sampler.in_flight += 1
        try:
            await one(i)
        finally:
            sampler.in_flight -= 1

    step = batch or runs
    for lo in range(0, runs, step):
        async with anyio.create_task_group() as tg:
            for i in range(lo, min(runs, lo + step)):
                tg.start_soon(tracked, i)


# --- tether --------------------------------------------------------------------------------------


class NoSyncOps(FaultyFileOps):
    """File operations whose syncs do nothing: the ``tether-nosync`` case (not durable)."""

    def fdatasync(self, fd: int) -> None:
        return None

    def fsync(self, fd: int) -> None:
        return None

    def fsync_dir(self, path: str) -> None:
        return None

    def fsync_dir_fd(self, fd: int, path: str) -> None:
        return None


async def case_tether(res: CaseResult, root: Path, *, sync: bool = True) -> None:
    model = SlowModel(res.latency_ms / 1000)
    store = tether.FileStore(root, redact=None, file_ops=None if sync else NoSyncOps())
    sampler = Sampler()
    async with tether.Supervisor(
        store, model=model, tools=tether_tools(approval_first=False), sweep_interval=None
    ) as sup:
        res.baseline_rss, res.baseline_fds = settle()
        done: list[tether.RunStatus] = []

        async def one(i: int) -> None:
            run_id = f"run-{i:05d}"
            await sup.start(run_id, f"job {i}")
            done.append(await sup.wait(run_id))

        syncs0 = store.syncs
        with sampler.running():
            t0 = time.perf_counter()
            await fan_out(res.runs, one, sampler)
            res.wall_s = time.perf_counter() - t0
        res.fsyncs = store.syncs - syncs0 if sync else 0
        res.notes.append("io_uring" if store.uses_io_uring else "writer threads")
    res.completed = sum(1 for s in done if s is tether.RunStatus.DONE)
    res.steps = model.calls + TOOL_CALLS * res.completed
    _copy_sampler(res, sampler)


async def case_parked(res: CaseResult, root: Path, *, heap: bool) -> None:
    model = SlowModel(res.latency_ms / 1000)
    store = tether.FileStore(root, redact=None)
    sampler = Sampler()
    async with tether.Supervisor(
        store, model=model, tools=tether_tools(approval_first=True), sweep_interval=None
    ) as sup:
        # One run parks and is forgotten first, so that lazily built state is in the baseline.
        await sup.start("warm-up", "job")
        await sup.wait("warm-up")
        if heap:
            tracemalloc.start()
        res.baseline_rss, res.baseline_fds = settle()
        if heap:
            res.heap_before = tracemalloc.get_traced_memory()[0]
        statuses: list[tether.RunStatus] = []

        async def one(i: int) -> None:
            run_id = f"run-{i:05d}"
            await sup.start(run_id, f"job {i}")
            statuses.append(await sup.wait(run_id))

        with sampler.running():
            t0 = time.perf_counter()
            await fan_out(res.runs, one, sampler, batch=PARK_BATCH)
            res.wall_s = time.perf_counter() - t0
        res.parked_rss, res.parked_fds = settle()
        if heap:
            res.heap_parked = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
        res.completed = sum(1 for s in statuses if s is tether.RunStatus.WAITING_FOR_APPROVAL)
        res.steps = model.calls - 1
    _copy_sampler(res, sampler)


def _copy_sampler(res: CaseResult, sampler: Sampler) -> None:
    res.peak_rss = peak_rss_bytes()
    res.sampled_peak_rss = sampler.max_rss
    res.peak_fds = sampler.max_fds
    res.busiest, res.rss_at_busiest = sampler.busiest, sampler.rss_at_busiest


# --- the seeds' design: SQLite, one row and one commit per event ---------------------------------

SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events ("
    "run_id TEXT, seq INTEGER, kind TEXT, payload BLOB, PRIMARY KEY (run_id, seq))"
)


class SeedsStore:
    """One WAL database, ``synchronous=FULL``; each thread of the pool has its own connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.limiter = anyio.CapacityLimiter(SQLITE_THREADS)
        self.commits = 0
        with contextlib.closing(self._connect()) as setup:
            setup.execute(SQLITE_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    def _write(self, run_id: str, seq: int, kind: str, payload: bytes) -> None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            with self._lock:
                self._conns.append(conn)
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (run_id, seq, kind, payload))
        self.commits += 1

    async def write(self, run_id: str, seq: int, kind: str, body: Any) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        await anyio.to_thread.run_sync(
            self._write, run_id, seq, kind, payload, limiter=self.limiter
        )

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


async def case_sqlite(res: CaseResult, root: Path) -> None:
    model = SlowModel(res.latency_ms / 1000)
    db = SeedsStore(root / "events.db")
    sampler = Sampler()
    res.baseline_rss, res.baseline_fds = settle()
    tool_calls = 0

    async def one(i: int) -> None:
        nonlocal tool_calls
        run_id = f"run-{i:05d}"
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"job {i}"}]
        seq = 0

        async def record(kind: str, body: Any) -> None:
            nonlocal seq
            await db.write(run_id, seq, kind, body)
            seq += 1

        await record("run_started", {"messages": messages})
        while True:
            reply = await model(system=None, messages=messages, tools=[])
            message = reply.as_message()
            await record("model_response", message)
            messages.append(message)
            uses = tool_uses(message)
            if not uses:
                await record("run_finished", {"status": "done"})
                return
            results = []
            for use in uses:
                await record("tool_started", {"call_id": use["id"], "name": use["name"]})
                content = await trivial_tool(**use["input"])
                tool_calls += 1
                await record("tool_result", {"call_id": use["id"], "content": content})
                results.append((use["id"], content))
            messages.append(tool_result_message(results))

    try:
        with sampler.running():
            t0 = time.perf_counter()
            await fan_out(res.runs, one, sampler)
            res.wall_s = time.perf_counter() - t0
    finally:
        db.close()
    res.completed = res.runs
    res.steps = model.calls + tool_calls
    res.notes.append(f"commits: {db.commits}")
    _copy_sampler(res, sampler)


# --- LangGraph with AsyncSqliteSaver -------------------------------------------------------------


async def case_langgraph(res: CaseResult, root: Path) -> None:
    graph_mod: Any = importlib.import_module("langgraph.graph")
    saver_mod: Any = importlib.import_module("langgraph.checkpoint.sqlite.aio")
    version: Any = importlib.import_module("importlib.metadata")
    res.notes.append(f"langgraph {version.version('langgraph')}")
    model = SlowModel(res.latency_ms / 1000)
    tool_calls = 0

    async def model_node(state: dict[str, Any]) -> dict[str, Any]:
        reply = await model(system=None, messages=list(state["messages"]), tools=[])
        return {"messages": [reply.as_message()]}

    async def tools_node(state: dict[str, Any]) -> dict[str, Any]:
        nonlocal tool_calls
        results = []
        for use in tool_uses(state["messages"][-1]):
            results.append((use["id"], await trivial_tool(**use["input"])))
            tool_calls += 1
        return {"messages": [tool_result_message(results)]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if tool_uses(state["messages"][-1]) else str(graph_mod.END)

    builder = graph_mod.StateGraph(AgentState)
    builder.add_node("model", model_node)
    builder.add_node("tools", tools_node)
    builder.add_edge(graph_mod.START, "model")
    builder.add_conditional_edges("model", route, ["tools", graph_mod.END])
    builder.add_edge("tools", "model")
    sampler = Sampler()
    async with saver_mod.AsyncSqliteSaver.from_conn_string(str(root / "lg.db")) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA synchronous") as cur:
            row = await cur.fetchone()
        res.notes.append(f"PRAGMA synchronous = {row[0]} (2 = FULL)")
        graph = builder.compile(checkpointer=saver)
        res.baseline_rss, res.baseline_fds = settle()
        finished = 0

        async def one(i: int) -> None:
            nonlocal finished
            config = {"configurable": {"thread_id": f"run-{i:05d}"}, "recursion_limit": 50}
            start = {"messages": [{"role": "user", "content": f"job {i}"}]}
            await graph.ainvoke(start, config, durability="sync")
            finished += 1

        with sampler.running():
            t0 = time.perf_counter()
            await fan_out(res.runs, one, sampler)
            res.wall_s = time.perf_counter() - t0
    res.completed = finished
    res.steps = model.calls + tool_calls
    _copy_sampler(res, sampler)


class AgentState(TypedDict):
    """LangGraph's state: the conversation, each node's messages appended to it."""

    messages: Annotated[list[dict[str, Any]], operator.add]


# --- DBOS with its system database on SQLite -----------------------------------------------------


async def case_dbos(res: CaseResult, root: Path) -> None:
    dbos_mod: Any = importlib.import_module("dbos")
    version: Any = importlib.import_module("importlib.metadata")
    res.notes.append(f"dbos {version.version('dbos')}")
    DBOS = dbos_mod.DBOS
    model = SlowModel(res.latency_ms / 1000)
    tool_calls = 0

    async def ask_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        reply = await model(system=None, messages=messages, tools=[])
        return reply.as_message()

    async def call_tool(item: str) -> dict[str, Any]:
        nonlocal tool_calls
        tool_calls += 1
        return await trivial_tool(item)

    model_step: Any = DBOS.step()(ask_model)
    tool_step: Any = DBOS.step()(call_tool)

    async def run_agent(prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        while True:
            message = await model_step(messages)
            messages.append(message)
            uses = tool_uses(message)
            if not uses:
                return str(message["content"][0]["text"])
            results = [(u["id"], await tool_step(u["input"]["item"])) for u in uses]
            messages.append(tool_result_message(results))

    agent: Any = DBOS.workflow()(run_agent)

    url = f"sqlite:///{root / 'dbos.sqlite'}"
    DBOS(config={"name": "tether-bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()
    sampler = Sampler()
    finished = 0
    try:
        res.baseline_rss, res.baseline_fds = settle()

        async def one(i: int) -> None:
            nonlocal finished
            with dbos_mod.SetWorkflowID(f"run-{i:05d}"):
                await agent(f"job {i}")
            finished += 1

        with sampler.running():
            t0 = time.perf_counter()
            await fan_out(res.runs, one, sampler)
            res.wall_s = time.perf_counter() - t0
    finally:
        DBOS.destroy()
    with contextlib.closing(sqlite3.connect(root / "dbos.sqlite")) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    res.notes.append(f"journal_mode = {mode}, synchronous = SQLite default")
    res.completed = finished
    res.steps = model.calls + tool_calls
    _copy_sampler(res, sampler)


# --- one case per child process ------------------------------------------------------------------


def missing_package(kind: str) -> str | None:
    for name in OPTIONAL_PACKAGES.get(kind, ()):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"not installed ({exc})"
    return None


def run_case(kind: str, latency_ms: int, runs: int, root: Path) -> CaseResult:
    res = CaseResult(kind=kind, latency_ms=latency_ms, runs=runs)
    missing = missing_package(kind)
    if missing is not None:
        res.ok, res.skipped = False, missing
        return res
    if kind == "tether":
        anyio.run(case_tether, res, root)
    elif kind == "tether-nosync":
        anyio.run(lambda: case_tether(res, root, sync=False))
    elif kind == "parked":
        anyio.run(lambda: case_parked(res, root, heap=False))
    elif kind == "parked-heap":
        anyio.run(lambda: case_parked(res, root, heap=True))
    elif kind == "sqlite":
        anyio.run(case_sqlite, res, root)
    elif kind == "langgraph":
        anyio.run(case_langgraph, res, root)
    elif kind == "dbos":
        asyncio.run(case_dbos(res, root))
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    expected = res.runs
    if res.completed != expected:
        res.ok = False
        res.notes.append(f"only {res.completed} of {expected} runs reached their end state")
    return res


@dataclass(frozen=True)
class Case:
    kind: Kind
    latency_ms: int
    runs: int

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.latency_ms}ms/n{self.runs}"


def build_cases(quick: bool, baseline_max: int, dbos_max: int) -> list[Case]:
    sizes = (100, 1000) if quick else (100, 1000, 10_000)
    cases: list[Case] = []
    for n in sizes:
        for lat in LATENCIES_MS:
            cases.append(Case("tether", lat, n))
            if n <= baseline_max:
                cases += [
                    Case("tether-nosync", lat, n),
                    Case("sqlite", lat, n),
                    Case("langgraph", lat, n),
                ]
            if n <= min(baseline_max, dbos_max):
                cases.append(Case("dbos", lat, n))
    parked_n = sizes[-1]
    cases += [Case("parked", 0, parked_n), Case("parked-heap", 0, parked_n)]
    return cases


@dataclass(frozen=True)
class Round:
    """Cases measured together: each repetition runs every case once, in turn."""

    cases: list[Case]
    repeat: int


def rounds_of(cases: list[Case], repeat: int, baseline_max: int) -> list[Round]:
    """Group the cases of one point (runs, latency) so that they alternate ``repeat`` times.

    Only points with baselines are repeated: there a ratio is taken, and alternating the
    systems spreads the machine's drift over all of them instead of onto whichever ran last.
    """
    points: dict[tuple[int, int, bool], list[Case]] = {}
    for case in cases:
        parked = case.kind.startswith("parked")
        points.setdefault((case.runs, case.latency_ms, parked), []).append(case)
    return [
        Round(group, repeat if runs <= baseline_max and not parked else 1)
        for (runs, _, parked), group in points.items()
    ]


def median_result(tries: list[CaseResult]) -> CaseResult:
    """The repetition with the median steps/s (the lower middle one of an even count), with
    every repetition's steps/s in ``samples``. A failed repetition makes the case failed."""
    failed = [r for r in tries if not r.ok]
    if failed:
        return failed[0]
    ranked = sorted(tries, key=lambda r: r.steps_per_s)
    chosen = ranked[(len(ranked) - 1) // 2]
    chosen.samples = [round(r.steps_per_s, 1) for r in tries]
    return chosen


def spawn_case(case: Case, root: Path) -> CaseResult:
    workdir = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    argv = [sys.executable, __file__, "--child", case.kind, str(case.latency_ms), str(case.runs)]
    try:
        proc = subprocess.run(
            [*argv, "--dir", str(workdir)],
            capture_output=True,
            text=True,
            timeout=CASE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        res = CaseResult(case.kind, case.latency_ms, case.runs, ok=False)
        res.skipped = f"timed out after {CASE_TIMEOUT:.0f} s"
        return res
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        res = CaseResult(case.kind, case.latency_ms, case.runs, ok=False)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        res.skipped = f"failed (exit {proc.returncode}): {tail[:300]}"
        return res
    data = json.loads(lines[-1])
    fields = set(CaseResult.__dataclass_fields__)
    return CaseResult(**{k: v for k, v in data.items() if k in fields})


# --- report --------------------------------------------------------------------------------------


def package_version(name: str) -> str | None:
    meta: Any = importlib.import_module("importlib.metadata")
    try:
        return str(meta.version(name))
    except Exception:
        return None


def machine_info(root: Path) -> dict[str, Any]:
    return {
        **_machine.machine_info(root),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "packages": {
            name: package_version(name)
            for name in ("tether", "langgraph", "langgraph-checkpoint-sqlite", "aiosqlite", "dbos")
        },
    }


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / KiB / KiB:.0f}"


def _kib(n: float | None) -> str:
    return "-" if n is None else f"{n / KiB:.2f}"


def format_results(results: list[CaseResult]) -> str:
    head = (
        f"{'case':<26} {'wall s':>8} {'steps/s':>9} {'fsyncs/s':>9} {'peak MiB':>9} "
        f"{'KiB/active':>10} {'peak fds':>8}  notes"
    )
    lines = [head]
    for r in results:
        if r.kind.startswith("parked"):
            continue
        if r.skipped is not None:
            lines.append(f"{r.key:<26} skipped: {r.skipped}")
            continue
        fps = r.fsyncs_per_s
        lines.append(
            f"{r.key:<26} {r.wall_s:>8.2f} {r.steps_per_s:>9.0f} "
            f"{'-' if fps is None else f'{fps:.0f}':>9} {_mib(r.peak_rss):>9} "
            f"{_kib(r.rss_per_active_run):>10} {r.peak_fds:>8}  "
            + ("" if r.ok else "INCOMPLETE ")
            + "; ".join(r.notes + ([f"tries: {r.samples}"] if len(r.samples) > 1 else []))
        )
    return "\n".join(lines)


def format_parked(results: list[CaseResult]) -> str:
    lines = []
    for r in results:
        if not r.kind.startswith("parked"):
            continue
        if r.skipped is not None:
            lines.append(f"{r.key}: skipped: {r.skipped}")
            continue
        if r.kind == "parked":
            lines.append(
                f"{r.runs} parked runs: RSS {_mib(r.baseline_rss)} -> {_mib(r.parked_rss)} MiB, "
                f"{_kib(r.rss_per_parked_run)} KiB per parked run; open fds "
                f"{r.baseline_fds} before, {r.parked_fds} parked (peak {r.peak_fds} while "
                f"parking, {PARK_BATCH} at a time)"
            )
        else:
            held = None if r.heap_per_parked_run is None else r.heap_per_parked_run * r.runs
            lines.append(
                f"{r.runs} parked runs: Python heap +{_kib(held)} KiB, "
                f"{_kib(r.heap_per_parked_run)} KiB per parked run (tracemalloc)"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    goal: str
    met: bool | None


def by_key(results: list[CaseResult]) -> dict[str, CaseResult]:
    return {r.key: r for r in results}


BASELINES = ("tether-nosync", "sqlite", "langgraph", "dbos")
"""What ``tether`` is compared with; against ``tether-nosync`` the ratio is the share of the
CPU-bound ceiling that the durable case reaches."""


def ratios(results: list[CaseResult]) -> list[dict[str, Any]]:
    table = by_key(results)
    out = []
    for r in results:
        if r.kind not in BASELINES or not r.ok or r.steps_per_s <= 0:
            continue
        mine = table.get(f"tether/{r.latency_ms}ms/n{r.runs}")
        if mine is None or not mine.ok:
            continue
        out.append(
            {
                "baseline": r.kind,
                "latency_ms": r.latency_ms,
                "runs": r.runs,
                "tether_steps_per_s": round(mine.steps_per_s, 1),
                "baseline_steps_per_s": round(r.steps_per_s, 1),
                "ratio": round(mine.steps_per_s / r.steps_per_s, 2),
            }
        )
    return out


def targets(results: list[CaseResult], rats: list[dict[str, Any]]) -> list[Target]:
    tether_runs = [r for r in results if r.kind == "tether"]
    most = max((r.runs for r in tether_runs), default=0)
    big = [r for r in tether_runs if r.runs == most]
    out = [
        Target(
            f"{most:,} runs complete in one process",
            float(sum(r.completed for r in big)),
            f"{most * len(big):,} completed",
            bool(big) and all(r.ok for r in big),
        )
    ]
    parked = next((r for r in results if r.kind == "parked" and r.ok), None)
    heap = next((r for r in results if r.kind == "parked-heap" and r.ok), None)
    if parked is not None:
        per = parked.rss_per_parked_run
        out.append(
            Target("RSS per parked run (bytes)", per, "<= 2048", per is not None and per <= 2 * KiB)
        )
        extra = None if parked.parked_fds is None else parked.parked_fds - parked.baseline_fds
        out.append(
            Target("descriptors held by parked runs", extra, "0", extra is not None and extra <= 0)
        )
    if heap is not None:
        per = heap.heap_per_parked_run
        out.append(
            Target(
                "Python heap per parked run (bytes)",
                per,
                "<= 2048",
                per is not None and per <= 2 * KiB,
            )
        )
    for base in ("langgraph", "dbos"):
        mine = [q for q in rats if q["baseline"] == base]
        if not mine:
            out.append(Target(f"steps/s vs {base}", None, ">= 10x at every N and latency", None))
            continue
        worst = min(q["ratio"] for q in mine)
        out.append(
            Target(
                f"steps/s vs {base} (lowest ratio)",
                worst,
                ">= 10x at every N and latency",
                worst >= 10,
            )
        )
    return out


def format_ratios(rats: list[dict[str, Any]], tgts: list[Target]) -> str:
    lines = [f"{'tether steps/s vs':<30} {'tether':>9} {'other':>9} {'ratio':>8}"]
    for q in rats:
        name = f"{q['baseline']} {q['latency_ms']}ms n={q['runs']}"
        lines.append(
            f"{name:<30} {q['tether_steps_per_s']:>9.0f} {q['baseline_steps_per_s']:>9.0f} "
            f"{q['ratio']:>7.2f}x"
        )
    lines.append("")
    lines.append(f"{'target':<44} {'value':>10} {'goal':>30}  status")
    for t in tgts:
        status = "n/a" if t.met is None else ("met" if t.met else "MISSED")
        value = "-" if t.value is None else f"{t.value:,.1f}"
        lines.append(f"{t.name:<44} {value:>10} {t.goal:>30}  {status}")
    return "\n".join(lines)


def plot(results: list[CaseResult], path: Path) -> str | None:
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return "matplotlib is not installed; no plot"
    fig, (ax_rate, ax_rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = {"tether": "C0", "sqlite": "C1", "langgraph": "C2", "dbos": "C3"}
    for kind, colour in colours.items():
        for lat in LATENCIES_MS:
            rows = sorted(
                (r for r in results if r.kind == kind and r.latency_ms == lat and r.ok),
                key=lambda r: r.runs,
            )
            if not rows:
                continue
            xs = [r.runs for r in rows]
            style = "-" if lat == 0 else "--"
            label = f"{kind}, model {lat} ms"
            ax_rate.plot(
                xs, [r.steps_per_s for r in rows], style, color=colour, marker="o", label=label
            )
            ax_rss.plot(
                xs,
                [r.peak_rss / KiB / KiB for r in rows],
                style,
                color=colour,
                marker="o",
                label=label,
            )
    for ax, title, unit in (
        (ax_rate, "steps/s (model + tool calls)", "steps/s"),
        (ax_rss, "peak RSS of the process", "MiB"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("runs in one process (all started at once)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_rate.legend(fontsize=8)
    fig.suptitle("Nine-step scripted agent, every step durable before the next")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="100 and 1,000 runs only")
    p.add_argument("--dir", type=Path, default=None, help="where to write (default: near repo)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--png", type=Path, default=DEFAULT_PNG, help="plot file")
    p.add_argument(
        "--baseline-max", type=int, default=1000, help="largest N for the baselines (slow)"
    )
    p.add_argument(
        "--dbos-max", type=int, default=100, help="largest N for DBOS (about 60 steps/s here)"
    )
    p.add_argument("--only", default=None, help="comma-separated kinds to run")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="times each compared case runs, alternating with the others (median reported)",
    )
    p.add_argument(
        "--child", nargs=3, metavar=("KIND", "LATENCY_MS", "RUNS"), help=argparse.SUPPRESS
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, lat, runs = args.child
        res = run_case(kind, int(lat), int(runs), args.dir)
        print(json.dumps(res.to_json()))
        return 0
    cases = build_cases(args.quick, args.baseline_max, args.dbos_max)
    if args.only:
        kinds = set(args.only.split(","))
        cases = [c for c in cases if c.kind in kinds]
    results: list[CaseResult] = []
    with scratch_dir(args.dir, "tether-scale-") as root:
        info = machine_info(root)
        if info["filesystem"] in {"tmpfs", "ramfs"}:
            print(f"warning: {root} is on {info['filesystem']}; fsync is free", file=sys.stderr)
        print(f"{len(cases)} cases on {root} ({info['filesystem']})", file=sys.stderr)
        started = time.perf_counter()
        for group in rounds_of(cases, args.repeat, args.baseline_max):
            tries: dict[Case, list[CaseResult]] = {}
            for _ in range(group.repeat):
                for case in group.cases:
                    res = spawn_case(case, root)
                    tries.setdefault(case, []).append(res)
                    shown = res.skipped or f"{res.wall_s:.2f} s, {res.steps_per_s:.0f} steps/s"
                    print(f"  {case.key:<26} {shown}", file=sys.stderr, flush=True)
            results += [median_result(tries[case]) for case in group.cases]
        elapsed = time.perf_counter() - started
    rats = ratios(results)
    tgts = targets(results, rats)
    print(format_results(results))
    print()
    print(format_parked(results))
    print()
    print(format_ratios(rats, tgts))
    print(f"\n{elapsed:.0f} s; filesystem {info['filesystem']} on {info['device']}")
    report = {
        "machine": info,
        "settings": {
            "quick": args.quick,
            "baseline_max_runs": args.baseline_max,
            "dbos_max_runs": args.dbos_max,
            "steps_per_run": STEPS,
            "model_calls_per_run": MODEL_CALLS,
            "tool_calls_per_run": TOOL_CALLS,
            "sqlite_threads": SQLITE_THREADS,
            "park_batch": PARK_BATCH,
            "repeat": args.repeat,
            "elapsed_s": round(elapsed, 1),
        },
        "results": [r.to_json() for r in results],
        "ratios": rats,
        "targets": [asdict(t) for t in tgts],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    problem = plot(results, args.png)
    print(problem or f"plot: {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
