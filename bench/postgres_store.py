"""PostgresStore next to FileStore: appends, supervisor steps and worker processes, side by side.

Run ``python bench/postgres_store.py [--quick] [--dir DIR] [--out FILE] [--repeats N]
[--worker-runs N]``.

One throwaway PostgreSQL server (``tether.testing._pgserver``: default settings, fsync on, plus
``track_wal_io_timing`` so that WAL syncs are timed; its cluster in the system temp directory)
and one scratch directory for the file store, both on this machine's disk. Every case runs on
a fresh store (a new directory, a new schema) with redaction off, and the stores take turns:
for each case the file store and PostgreSQL run back to back, the case list walked forwards on
even repeats and backwards on odd ones, so that drift in a shared machine's disk or CPU hits
both sides alike. The table gives the median of the repeats, the ratio of the medians, and
the median of each repeat's ratio (``paired``: the two measured back to back). Before the
first case, each store takes half a second of appends that are not counted.

What is measured:

- ``append``: appends of one 1 KiB event (``ModelResponse``) each, from 1, 16 and 64 runs at
  once, each run appended to by its own task, one append after another; counted during a fixed
  window after a short warm-up.
- ``steps``: the ``Supervisor`` of ``supervisor_scale`` (the same scripted agent, nine steps a
  run: five model calls with no latency, four tool calls) with N runs at once: start N runs,
  wait for all of them, again until the window is over (after one round of warm-up).
- ``workers``: runs created in the store but not started (a ``RunStarted`` with the app's
  manifest), then 1 or 2 worker processes (``--child-worker``, a ``Supervisor`` with a sweep
  every 0.1 s) over the store until every run is done. The clock starts when the workers, their
  store already open, are told to go, and stops when the last run is reported done (each worker
  reports the runs it saw finish); the store is then read to check that every run is done. Two
  file-store workers share one directory through the journals' locks, two PostgreSQL workers
  one schema through leases.

A third column, ``pg async``, repeats the append and step cases on a database with
``synchronous_commit = off``, where a commit does not wait for its WAL flush: the difference
to ``postgres`` is what waiting for that flush costs. Per case the report also gives CPU time
per operation, of this process (the workers' own, for ``workers``) and of every PostgreSQL
process, and from PostgreSQL's statistics the committed transactions, WAL syncs and WAL bytes
per operation (over the whole sample, warm-up included) and the mean time of one WAL sync.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import asyncpg
from _machine import machine_info, mount_of, scratch_dir
from anyio.streams.buffered import BufferedByteReceiveStream
from supervisor_scale import STEPS, TOOL_CALLS, Sampler, fan_out, script, tether_tools

import tether
from tether.journal import ModelResponse, RunStarted
from tether.supervisor import fold
from tether.supervisor._loop import Runtime, build_manifest
from tether.testing._pgserver import PostgresServer

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "postgres_store.json"

RUN_COUNTS = (1, 16, 64)
WORKER_COUNTS = (1, 2)
EVENT = ModelResponse(message={"role": "assistant", "content": "x" * 1000})
NOSYNC_DB = "tether_nosync"
CREATE_CONCURRENCY = 16
WORKER_TIMEOUT = 180.0
STATS_SETTLE = 0.1  # seconds for closed backends to flush their statistics
WARMUP_WINDOW = 0.5  # seconds of appends on each store before the first measurement
SERVER_SETTINGS = {"track_wal_io_timing": "on"}  # times WAL syncs; changes nothing else
PG_SETTINGS = (
    "track_wal_io_timing",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "commit_delay",
    "shared_buffers",
    "max_wal_size",
)

Kind = Literal["append", "steps", "workers"]
Variant = Literal["file", "postgres", "pg-async"]
VARIANTS: tuple[Variant, ...] = ("file", "postgres", "pg-async")
UNITS: dict[Kind, str] = {"append": "appends/s", "steps": "steps/s", "workers": "steps/s"}


def new_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(script, name="scripted-bench")


# --- what to measure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """``n`` is the number of runs at once (append, steps) or of worker processes."""

    kind: Kind
    n: int

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.n}"

    @property
    def label(self) -> str:
        if self.kind == "append":
            return f"append 1 KiB, {self.n} run{'s' if self.n > 1 else ''}"
        if self.kind == "steps":
            return f"steps, {self.n} run{'s' if self.n > 1 else ''} at once"
        return f"workers, {self.n} process{'es' if self.n > 1 else ''}"

    @property
    def variants(self) -> tuple[Variant, ...]:
        return ("file", "postgres") if self.kind == "workers" else ("file", "postgres", "pg-async")


@dataclass(frozen=True)
class Settings:
    repeats: int
    warmup: float
    append_window: float
    steps_window: float
    worker_runs: int


@dataclass
class Sample:
    """One measurement: ``ops`` counted in ``seconds``, and what they cost.

    ``client_cpu`` and ``server_cpu`` cover the counted window; ``xacts`` and ``wal_syncs``
    (PostgreSQL only) the whole sample, whose operations are ``all_ops``.
    """

    ops: int
    seconds: float
    repeat: int = 0
    all_ops: int = 0
    client_cpu: float = 0.0
    server_cpu: float | None = None
    xacts: int | None = None
    wal_syncs: int | None = None
    wal_sync_ms: float | None = None
    wal_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Result:
    case: Case
    variant: Variant
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return statistics.median(s.rate for s in self.samples) if self.samples else None

    def _per_op(self, name: str, ops: Callable[[Sample], int]) -> float | None:
        values = [(getattr(s, name), ops(s)) for s in self.samples]
        if not values or any(v is None for v, _ in values):
            return None
        total = sum(n for _, n in values)
        return sum(v for v, _ in values) / total if total else None

    def per_op(self) -> dict[str, float | None]:
        return {
            "client_cpu_ms": _scaled(self._per_op("client_cpu", lambda s: s.ops), 1000),
            "server_cpu_ms": _scaled(self._per_op("server_cpu", lambda s: s.ops), 1000),
            "xacts": self._per_op("xacts", lambda s: s.all_ops),
            "wal_syncs": self._per_op("wal_syncs", lambda s: s.all_ops),
            "wal_bytes": self._per_op("wal_bytes", lambda s: s.all_ops),
            "ms_per_wal_sync": self._per_sync(),
        }

    def _per_sync(self) -> float | None:
        syncs = sum(s.wal_syncs or 0 for s in self.samples)
        if not syncs:
            return None
        return sum(s.wal_sync_ms or 0.0 for s in self.samples) / syncs

    def to_json(self) -> dict[str, Any]:
        rate = self.rate
        return {
            "rate": None if rate is None else round(rate, 1),
            "rates": [round(s.rate, 1) for s in self.samples],
            "per_op": {k: None if v is None else round(v, 4) for k, v in self.per_op().items()},
            "samples": [
                {
                    "ops": s.ops,
                    "seconds": round(s.seconds, 3),
                    "repeat": s.repeat,
                    "all_ops": s.all_ops,
                    "client_cpu_s": round(s.client_cpu, 3),
                    "server_cpu_s": None if s.server_cpu is None else round(s.server_cpu, 3),
                    "xacts": s.xacts,
                    "wal_syncs": s.wal_syncs,
                    "wal_sync_ms": None if s.wal_sync_ms is None else round(s.wal_sync_ms, 1),
                    "wal_bytes": s.wal_bytes,
                    "notes": s.notes,
                }
                for s in self.samples
            ],
            "failures": self.failures,
        }


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


# --- where runs live -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A fresh store: a directory, or a schema of a database (``location`` is the DSN)."""

    variant: Variant
    location: str
    schema: str

    def open(self) -> tether.Store:
        if self.variant == "file":
            return tether.FileStore(self.location, redact=None)
        return tether.PostgresStore(self.location, schema=self.schema, redact=None)

    @property
    def child_args(self) -> list[str]:
        return [self.variant, self.location, self.schema]


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: the postmaster, its live children and reaped ones."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int | str) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None

    main = fields(postmaster)
    if main is None:
        return 0.0
    # after ") ": state ppid ... utime (index 11) stime cutime cstime
    total = sum(int(x) for x in main[11:15])
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = fields(name)
        if f is not None and f[1] == str(postmaster):
            total += int(f[11]) + int(f[12])
    return total / tick


@dataclass(frozen=True)
class Counters:
    """PostgreSQL's cumulative statistics at one moment (``pg_stat_database``, ``pg_stat_wal``)."""

    xacts: int
    wal_syncs: int
    wal_sync_ms: float
    wal_bytes: int


@dataclass
class Bench:
    """The scratch directory, the server and an admin connection to each of its databases."""

    root: Path
    dsns: dict[Variant, str]
    admins: dict[Variant, asyncpg.Connection[Any]]
    postmaster: int
    settings: Settings
    log: Path
    _seq: int = 0

    def _name(self) -> str:
        self._seq += 1
        return f"b{self._seq:03d}"

    @asynccontextmanager
    async def place(self, variant: Variant) -> AsyncIterator[Place]:
        name = self._name()
        if variant == "file":
            path = self.root / name
            try:
                yield Place(variant, str(path), name)
            finally:
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))
            return
        try:
            yield Place(variant, self.dsns[variant], name)
        finally:
            await self.admins[variant].execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")

    def cpu(self) -> float:
        return server_cpu(self.postmaster)

    async def counters(self, variant: Variant) -> Counters | None:
        """Committed transactions of the variant's database; WAL syncs, their time and bytes."""
        if variant == "file":
            return None
        await anyio.sleep(STATS_SETTLE)
        conn = self.admins[variant]
        db = self.dsns[variant].rsplit("/", 1)[1]
        row = await conn.fetchrow(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1), "
            "wal_sync, wal_sync_time, wal_bytes FROM pg_stat_wal",
            db,
        )
        assert row is not None
        return Counters(int(row[0]), int(row[1]), float(row[2]), int(row[3]))


def add_counters(sample: Sample, before: Counters | None, after: Counters | None) -> None:
    if before is None or after is None:
        return
    sample.xacts = after.xacts - before.xacts
    sample.wal_syncs = after.wal_syncs - before.wal_syncs
    sample.wal_sync_ms = after.wal_sync_ms - before.wal_sync_ms
    sample.wal_bytes = after.wal_bytes - before.wal_bytes


def started_event(run_id: str, manifest: Any) -> RunStarted:
    messages = [{"role": "user", "content": f"job {run_id}"}]
    return RunStarted(run_id=run_id, manifest=manifest, messages=messages)


def app_manifest(store: tether.Store) -> Any:
    rt = Runtime(
        model=new_model(), tools=tether_tools(approval_first=False), load_blob=store.load_blob
    )
    return build_manifest(rt, system=None, app_version="")


# --- append --------------------------------------------------------------------------------------


async def measure_appends(bench: Bench, place: Place, runs: int, window: float) -> Sample:
    before = await bench.counters(place.variant)
    async with place.open() as store:
        manifest = app_manifest(store)
        handles = [
            await store.create(rid, [started_event(rid, manifest)])
            for rid in (f"run-{i:03d}" for i in range(runs))
        ]
        count = 0
        stop = False

        async def writer(handle: tether.RunJournal) -> None:
            nonlocal count
            while not stop:
                await handle.append([EVENT])
                count += 1

        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(writer, handle)
            await anyio.sleep(bench.settings.warmup)
            c0, cpu0, srv0, t0 = count, time.process_time(), bench.cpu(), time.perf_counter()
            await anyio.sleep(window)
            c1, cpu1, srv1, t1 = count, time.process_time(), bench.cpu(), time.perf_counter()
            stop = True
        for handle in handles:
            await handle.aclose()
    sample = Sample(ops=c1 - c0, seconds=t1 - t0, all_ops=count, client_cpu=cpu1 - cpu0)
    if place.variant != "file":
        sample.server_cpu = srv1 - srv0
    add_counters(sample, before, await bench.counters(place.variant))
    return sample


# --- supervisor steps ----------------------------------------------------------------------------


async def measure_steps(bench: Bench, place: Place, runs: int, window: float) -> Sample:
    before = await bench.counters(place.variant)
    model = new_model()
    store = place.open()
    sampler = Sampler()  # counts runs in flight for fan_out; not sampled here
    done = 0
    rounds = 0
    async with (
        store,
        tether.Supervisor(
            store, model=model, tools=tether_tools(approval_first=False), sweep_interval=None
        ) as sup,
    ):

        async def one(i: int) -> None:
            nonlocal done
            run_id = f"r{rounds:05d}-{i:03d}"
            await sup.start(run_id, f"job {i}")
            if await sup.wait(run_id) is tether.RunStatus.DONE:
                done += 1

        await fan_out(runs, one, sampler)  # warm-up round
        rounds += 1
        calls0, done0 = model.calls, done
        cpu0, srv0, t0 = time.process_time(), bench.cpu(), time.perf_counter()
        while time.perf_counter() - t0 < window:
            await fan_out(runs, one, sampler)
            rounds += 1
        cpu1, srv1, t1 = time.process_time(), bench.cpu(), time.perf_counter()
    steps = model.calls - calls0 + TOOL_CALLS * (done - done0)
    sample = Sample(ops=steps, seconds=t1 - t0, all_ops=model.calls + TOOL_CALLS * done)
    sample.client_cpu = cpu1 - cpu0
    if place.variant != "file":
        sample.server_cpu = srv1 - srv0
    expected = runs * rounds
    if done != expected:
        sample.notes.append(f"only {done} of {expected} runs done")
    add_counters(sample, before, await bench.counters(place.variant))
    return sample


# --- worker processes ----------------------------------------------------------------------------


async def create_runs(place: Place, ids: Sequence[str]) -> None:
    """Runs that exist durably but that no process has started: any worker may take them."""
    async with place.open() as store:
        manifest = app_manifest(store)
        limiter = anyio.CapacityLimiter(CREATE_CONCURRENCY)

        async def make(run_id: str) -> None:
            async with limiter:
                await (await store.create(run_id, [started_event(run_id, manifest)])).aclose()

        async with anyio.create_task_group() as tg:
            for run_id in ids:
                tg.start_soon(make, run_id)


async def unfinished(place: Place, ids: Sequence[str]) -> list[str]:
    async with place.open() as store:
        out = []
        for run_id in ids:
            state = fold(await store.read(run_id))
            if state.finished is None or state.finished.status != "done":
                out.append(run_id)
        return out


@dataclass
class Worker:
    proc: anyio.abc.Process
    out: BufferedByteReceiveStream
    calls: int = 0
    cpu: float = 0.0

    async def line(self) -> str:
        return (await self.out.receive_until(b"\n", 4096)).decode()


async def spawn_worker(place: Place, log: Path) -> Worker:
    argv = [sys.executable, __file__, "--child-worker", *place.child_args]
    with log.open("ab") as stderr:  # the child keeps its own copy of the descriptor
        proc = await anyio.open_process(
            argv, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    assert proc.stdout is not None
    return Worker(proc, BufferedByteReceiveStream(proc.stdout))


async def measure_workers(bench: Bench, place: Place, procs: int) -> Sample:
    ids = [f"run-{i:04d}" for i in range(bench.settings.worker_runs)]
    await create_runs(place, ids)
    workers = [await spawn_worker(place, bench.log) for _ in range(procs)]
    done: set[str] = set()
    all_done = anyio.Event()
    ended: float | None = None
    sample = Sample(ops=0, seconds=0.0)
    try:
        with anyio.fail_after(60):
            for w in workers:
                if (line := await w.line()) != "ready":
                    raise RuntimeError(f"worker said {line!r}")
        before = await bench.counters(place.variant)

        async def listen(w: Worker) -> None:
            nonlocal ended
            while True:
                try:
                    line = await w.line()
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return
                word, _, arg = line.partition(" ")
                if word == "done":
                    done.add(arg)
                    if len(done) == len(ids) and ended is None:
                        ended = time.perf_counter()
                        all_done.set()
                elif word == "calls":
                    w.calls = int(arg)
                elif word == "cpu":
                    w.cpu = float(arg)

        async with anyio.create_task_group() as tg:
            for w in workers:
                tg.start_soon(listen, w)
            srv0, t0 = bench.cpu(), time.perf_counter()
            for w in workers:
                assert w.proc.stdin is not None
                await w.proc.stdin.send(b"go\n")
            with anyio.move_on_after(WORKER_TIMEOUT):
                await all_done.wait()
            srv1 = bench.cpu()
            for w in workers:  # end of input: the worker stops
                assert w.proc.stdin is not None
                await w.proc.stdin.aclose()
            with anyio.fail_after(60):
                for w in workers:
                    await w.proc.wait()
        after = await bench.counters(place.variant)
    finally:
        for w in workers:
            if w.proc.returncode is None:
                w.proc.kill()
                await w.proc.wait()
    if ended is None:
        sample.notes.append(f"timed out: {len(done)} of {len(ids)} runs reported done")
        return sample
    sample.seconds = ended - t0
    sample.ops = sample.all_ops = STEPS * len(ids)
    sample.client_cpu = sum(w.cpu for w in workers)
    if place.variant != "file":
        sample.server_cpu = srv1 - srv0
    add_counters(sample, before, after)
    calls = sum(w.calls for w in workers)
    sample.notes.append(f"model calls {calls} (expected {len(ids) * (STEPS - TOOL_CALLS)})")
    codes = [w.proc.returncode for w in workers]
    if any(c != 0 for c in codes):
        sample.notes.append(f"worker exit codes {codes}")
    missing = await unfinished(place, ids)
    if missing:
        sample.notes.append(f"{len(missing)} runs not done in the store, e.g. {missing[0]}")
    return sample


class DoneReporter(logging.Handler):
    """Writes ``done RUN_ID`` to stdout for every run the supervisor sees finish as done."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "status", None) == "done":
            sys.stdout.write(f"done {getattr(record, 'run_id', '?')}\n")
            sys.stdout.flush()


async def child_worker(variant: str, location: str, schema: str) -> None:
    """A worker: open the store, say ``ready``, serve from ``go`` until the end of input."""
    place = Place(next(v for v in VARIANTS if v == variant), location, schema)
    logger = logging.getLogger("tether.supervisor")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(DoneReporter())
    model = new_model()
    async with place.open() as store:
        print("ready", flush=True)
        if (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() != "go":
            return
        cpu0 = time.process_time()
        async with tether.Supervisor(
            store, model=model, tools=tether_tools(approval_first=False), sweep_interval=0.1
        ):
            await anyio.to_thread.run_sync(sys.stdin.read)
        print(f"calls {model.calls}", flush=True)
        print(f"cpu {time.process_time() - cpu0:.4f}", flush=True)


# --- running the cases ---------------------------------------------------------------------------


def build_cases() -> list[Case]:
    return [
        *(Case("append", n) for n in RUN_COUNTS),
        *(Case("steps", n) for n in RUN_COUNTS),
        *(Case("workers", n) for n in WORKER_COUNTS),
    ]


async def measure(bench: Bench, case: Case, variant: Variant) -> Sample:
    s = bench.settings
    async with bench.place(variant) as place:
        if case.kind == "append":
            return await measure_appends(bench, place, case.n, s.append_window)
        if case.kind == "steps":
            return await measure_steps(bench, place, case.n, s.steps_window)
        return await measure_workers(bench, place, case.n)


async def run_all(bench: Bench, cases: list[Case]) -> dict[tuple[Case, Variant], Result]:
    results = {(c, v): Result(c, v) for c in cases for v in c.variants}
    for variant in VARIANTS:  # first use of each store: not counted
        async with bench.place(variant) as place:
            await measure_appends(bench, place, 16, WARMUP_WINDOW)
    for rep in range(bench.settings.repeats):
        order = cases if rep % 2 == 0 else cases[::-1]
        for i, case in enumerate(order):
            variants = case.variants if (rep + i) % 2 == 0 else case.variants[::-1]
            for variant in variants:
                res = results[(case, variant)]
                try:
                    sample = await measure(bench, case, variant)
                    sample.repeat = rep
                except Exception as exc:
                    res.failures.append(f"{type(exc).__name__}: {exc}")
                    print(f"  {case.key:<10} {variant:<9} failed: {exc}", file=sys.stderr)
                    continue
                if sample.seconds > 0:
                    res.samples.append(sample)
                else:
                    res.failures.extend(sample.notes)
                notes = "; ".join(sample.notes)
                print(
                    f"  {case.key:<10} {variant:<9} {sample.rate:>9.0f} {UNITS[case.kind]}"
                    f"{'  ' + notes if notes else ''}",
                    file=sys.stderr,
                    flush=True,
                )
    return results


# --- report --------------------------------------------------------------------------------------


def _num(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def ratio(
    results: dict[tuple[Case, Variant], Result], case: Case, variant: Variant
) -> float | None:
    base = results[(case, "file")].rate
    other = results[(case, variant)].rate
    return None if not base or other is None else other / base


def paired_ratio(
    results: dict[tuple[Case, Variant], Result], case: Case, variant: Variant
) -> float | None:
    """The median over repeats of ``variant / file``, each measured back to back."""
    base = {s.repeat: s.rate for s in results[(case, "file")].samples}
    pairs = [
        s.rate / base[s.repeat] for s in results[(case, variant)].samples if base.get(s.repeat)
    ]
    return statistics.median(pairs) if pairs else None


def format_table(results: dict[tuple[Case, Variant], Result], cases: list[Case]) -> str:
    lines = [
        f"{'case':<30} {'unit':>9} {'file':>9} {'postgres':>9} {'pg/file':>8} {'paired':>7} "
        f"{'pg async':>9}"
    ]
    for c in cases:
        pg_async = results.get((c, "pg-async"))
        file, pg = results[(c, "file")].rate, results[(c, "postgres")].rate
        lines.append(
            f"{c.label:<30} {UNITS[c.kind]:>9} {_num(file):>9} {_num(pg):>9} "
            f"{_num(ratio(results, c, 'postgres'), '.2f'):>8} "
            f"{_num(paired_ratio(results, c, 'postgres'), '.2f'):>7} "
            f"{_num(None if pg_async is None else pg_async.rate):>9}"
        )
    return "\n".join(lines)


def format_costs(results: dict[tuple[Case, Variant], Result], cases: list[Case]) -> str:
    lines = [
        f"{'per operation':<30} {'variant':<9} {'client CPU ms':>13} {'server CPU ms':>13} "
        f"{'xacts':>6} {'WAL syncs':>9} {'WAL bytes':>9} {'ms/WAL sync':>11}"
    ]
    for c in cases:
        for v in c.variants:
            p = results[(c, v)].per_op()
            if v == "pg-async":  # its few WAL syncs are the WAL writer's, in the background
                p["ms_per_wal_sync"] = None
            lines.append(
                f"{c.label:<30} {v:<9} {_num(p['client_cpu_ms'], '.3f'):>13} "
                f"{_num(p['server_cpu_ms'], '.3f'):>13} {_num(p['xacts'], '.2f'):>6} "
                f"{_num(p['wal_syncs'], '.2f'):>9} {_num(p['wal_bytes']):>9} "
                f"{_num(p['ms_per_wal_sync'], '.2f'):>11}"
            )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="one repeat, short windows, 100 runs")
    p.add_argument("--repeats", type=int, default=None, help="repeats of every case (default 3)")
    p.add_argument("--dir", type=Path, default=None, help="where the file store writes")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument(
        "--worker-runs", type=int, default=None, help="runs for the worker cases (default 400)"
    )
    p.add_argument(
        "--child-worker", nargs=3, metavar=("VARIANT", "WHERE", "SCHEMA"), help=argparse.SUPPRESS
    )
    return p.parse_args(argv)


def settings_of(args: argparse.Namespace) -> Settings:
    if args.quick:
        s = Settings(repeats=1, warmup=0.2, append_window=1.0, steps_window=0.8, worker_runs=100)
    else:
        s = Settings(repeats=3, warmup=0.3, append_window=1.0, steps_window=1.0, worker_runs=400)
    return Settings(
        repeats=args.repeats or s.repeats,
        warmup=s.warmup,
        append_window=s.append_window,
        steps_window=s.steps_window,
        worker_runs=args.worker_runs or s.worker_runs,
    )


async def server_facts(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        facts: dict[str, Any] = {"version": await conn.fetchval("SHOW server_version")}
        for name in PG_SETTINGS:
            facts[name] = await conn.fetchval(f"SHOW {name}")
        return facts
    finally:
        await conn.close()


async def main_async(
    server: PostgresServer, root: Path, settings: Settings
) -> tuple[dict[tuple[Case, Variant], Result], dict[str, Any]]:
    admin = await asyncpg.connect(server.dsn)
    await admin.execute(f"CREATE DATABASE {NOSYNC_DB}")
    await admin.execute(f"ALTER DATABASE {NOSYNC_DB} SET synchronous_commit = off")
    nosync_dsn = server.dsn.rsplit("/", 1)[0] + f"/{NOSYNC_DB}"
    admin_nosync = await asyncpg.connect(nosync_dsn)
    try:
        if await admin_nosync.fetchval("SHOW synchronous_commit") != "off":
            raise RuntimeError(f"synchronous_commit is not off in {NOSYNC_DB}")
        facts = await server_facts(server.dsn)
        pid_file = server.data_dir / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        bench = Bench(
            root=root,
            dsns={"postgres": server.dsn, "pg-async": nosync_dsn},
            admins={"postgres": admin, "pg-async": admin_nosync},
            postmaster=postmaster,
            settings=settings,
            log=root / "workers.log",
        )
        results = await run_all(bench, build_cases())
        return results, facts
    finally:
        await admin_nosync.close()
        await admin.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_worker:
        anyio.run(child_worker, *args.child_worker)
        return 0
    settings = settings_of(args)
    cases = build_cases()
    started = time.perf_counter()
    with (
        scratch_dir(args.dir, "tether-pgstore-") as root,
        PostgresServer(settings=SERVER_SETTINGS) as server,
    ):
        info = machine_info(root)
        if info["filesystem"] in {"tmpfs", "ramfs"}:
            print(f"warning: {root} is on {info['filesystem']}; fsync is free", file=sys.stderr)
        dev, mnt, fstype = mount_of(server.data_dir)
        info["postgres_data"] = {"device": dev, "mount_point": mnt, "filesystem": fstype}
        print(
            f"file store on {root} ({info['filesystem']} on {info['device']}); "
            f"PostgreSQL on {server.data_dir} ({fstype} on {dev})",
            file=sys.stderr,
        )
        results, facts = anyio.run(main_async, server, root, settings)
        log = root / "workers.log"
        worker_log = log.read_text()[-3000:] if log.exists() else ""
    elapsed = time.perf_counter() - started
    print(format_table(results, cases))
    print()
    print(format_costs(results, cases))
    print(
        f"\n{elapsed:.0f} s; PostgreSQL {facts['version']}, fsync {facts['fsync']}, "
        f"synchronous_commit {facts['synchronous_commit']}, wal_sync_method "
        f"{facts['wal_sync_method']}; pg async: synchronous_commit off"
    )
    if worker_log.strip():
        print(f"\nworker log (tail):\n{worker_log}", file=sys.stderr)
    info["postgres"] = facts
    info["asyncpg"] = asyncpg.__version__
    report = {
        "machine": info,
        "settings": {
            **vars(settings),
            "quick": args.quick,
            "event_bytes": len(EVENT.message["content"]),
            "steps_per_run": STEPS,
            "redact": None,
            "postgres_store": {"pool_size": 16, "lease_ttl": 30.0},
            "worker_sweep_interval": 0.1,
            "elapsed_s": round(elapsed, 1),
        },
        "summary": "median of repeats; file and postgres back to back, order alternating; "
        "ratio: of the medians; paired ratio: median of the repeats' ratios",
        "results": {
            c.key: {
                "label": c.label,
                "unit": UNITS[c.kind],
                **{v: results[(c, v)].to_json() for v in c.variants},
                "ratio_postgres_file": _round(ratio(results, c, "postgres")),
                "paired_ratio_postgres_file": _round(paired_ratio(results, c, "postgres")),
                "ratio_pg_async_file": _round(ratio(results, c, "pg-async"))
                if "pg-async" in c.variants
                else None,
            }
            for c in cases
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


if __name__ == "__main__":
    sys.exit(main())
