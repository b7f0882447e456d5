"""Journal append throughput: tether's async API next to the baselines it has to beat.

Run ``python bench/journal_throughput.py [--quick] [--dir DIR] [--out FILE]``.

Every measurement runs in one process, on one directory, and counts durable records (each
append returned after ``fdatasync``) during a fixed window after a short warm-up. The cases are
run in a list that is walked forwards on even repeats and backwards on odd ones, so drift in a
noisy machine's disk or CPU hits each side of a comparison alike; the report gives the median
of the repeats and the ratios of those medians.

What is compared:

- ``tether``: ``Journal.append`` through the async API, one event per record, for several record
  sizes and group sizes (events per ``append``), one journal with many appender tasks, and many
  journals appended concurrently (one task each). Appends go through ``io_uring`` where the
  kernel allows it (``FileStore``'s default).
- ``tether-threads``: the same appends with ``io_uring=False``, through the writer threads.
- ``plain``: ``os.write`` + ``os.fdatasync`` per record on a growing ``O_APPEND`` file, one
  thread per file: the cost of durability with no framing, checksums or event loop.
- ``aiofiles``: ``write`` + ``flush`` + ``fdatasync`` per record, each hop through the
  default executor, as an async application would do without a dedicated writer.
- ``sqlite``: one row per event in a WAL database with ``synchronous=FULL`` and one connection
  per writer thread, the design tether's journal replaced.
- ``handoff``: the least that any design keeping ``fdatasync`` off the event loop pays here:
  each asyncio task hands raw bytes to a long-lived thread of its own (one per file, zero-filled
  preallocated space like tether's), which writes, syncs and wakes the loop; no framing, no
  checksum, no batching. Its ratios to ``plain`` are the ceiling for tether's async API on the
  machine at hand, and ``plain`` to ``sqlite`` the ceiling of the SQLite comparison for any
  design that syncs each file on its own.

A "record" of N bytes is one encoded event of about N bytes for tether, and N bytes written for
the baselines. MB/s counts record bytes (10**6 bytes per MB), not framing.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import queue
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiofiles
import aiofiles.os
import anyio
from _machine import machine_info, scratch_dir

from tether.journal import FileStore, SecretRedactor, ToolResult
from tether.journal._records import encode_event

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "journal_throughput.json"

KiB = 1024
RECORD_SIZES = (128, KiB, 16 * KiB, 256 * KiB)
GROUP_SIZES = (1, 8, 64)
JOURNAL_COUNTS = (1, 16, 64, 256)
PLAIN_THREADS = (16, 64)
SQLITE_WRITERS = (1, 16)
APPENDERS_ON_ONE_JOURNAL = 16

Kind = Literal["tether", "tether-threads", "plain", "aiofiles", "sqlite", "handoff"]


# --- what to measure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One measured configuration.

    ``writers`` is the number of journals, files or database connections written concurrently;
    ``appenders`` the number of tasks appending to each tether journal.
    """

    kind: Kind
    record_size: int
    group: int = 1
    writers: int = 1
    appenders: int = 1
    redact: bool = False

    @property
    def key(self) -> str:
        parts = [self.kind, _size_label(self.record_size), f"g{self.group}", f"w{self.writers}"]
        if self.appenders > 1:
            parts.append(f"a{self.appenders}")
        if self.redact:
            parts.append("redact")
        return "/".join(parts)


@dataclass(frozen=True)
class Window:
    """How long one measurement warms up and then counts, in seconds."""

    warmup: float
    duration: float


@dataclass(frozen=True)
class Sample:
    """Records made durable during one measurement window."""

    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Result:
    """Every repeat of one case, summarized by medians."""

    case: Case
    rates: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * self.case.record_size / 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.case.key,
            **asdict(self.case),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
            "rates": [round(r, 1) for r in self.rates],
        }


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two cases' median rates, with an optional target."""

    name: str
    numerator: Case
    denominator: Case
    target: float | None = None

    def value(self, results: dict[Case, Result]) -> float:
        den = results[self.denominator].records_per_s
        return results[self.numerator].records_per_s / den if den else 0.0

    def met(self, results: dict[Case, Result]) -> bool | None:
        return None if self.target is None else self.value(results) >= self.target

    def paired(self, results: dict[Case, Result]) -> float:
        """Median of the per-repeat ratios: the two sides of a pair ran close together in time."""
        pairs = zip(results[self.numerator].rates, results[self.denominator].rates, strict=True)
        return statistics.median(n / d if d else 0.0 for n, d in pairs)


def _size_label(n: int) -> str:
    return f"{n // KiB}KiB" if n >= KiB else f"{n}B"


def build_cases() -> list[Case]:
    """Every case, in an order that keeps the two sides of each comparison next to each other."""
    one_k = [
        Case("tether", KiB),
        Case("tether-threads", KiB),
        Case("plain", KiB),
        Case("aiofiles", KiB),
        Case("tether", KiB, appenders=APPENDERS_ON_ONE_JOURNAL),
        Case("tether", KiB, redact=True),
        Case("sqlite", KiB),
        Case("handoff", KiB),
    ]
    by_size = [
        c
        for size in RECORD_SIZES
        for c in (
            *(Case("tether", size, group=g) for g in GROUP_SIZES),
            Case("plain", size),
        )
    ]
    concurrent = [
        c
        for n in JOURNAL_COUNTS[1:]
        for c in (
            Case("tether", KiB, writers=n),
            *([Case("tether-threads", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("plain", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("handoff", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("sqlite", KiB, writers=n)] if n in SQLITE_WRITERS else []),
        )
    ]
    cases = one_k + by_size + concurrent
    return list(dict.fromkeys(cases))  # drop repeats (the 1 KiB group-1 cases), keep order


def build_ratios() -> list[Ratio]:
    tether_1k = Case("tether", KiB)
    ratios = [
        Ratio("1 journal, 1 KiB, async vs plain sync loop", tether_1k, Case("plain", KiB), 1.0),
        Ratio(
            f"1 journal, {APPENDERS_ON_ONE_JOURNAL} appenders vs plain sync loop",
            Case("tether", KiB, appenders=APPENDERS_ON_ONE_JOURNAL),
            Case("plain", KiB),
        ),
        Ratio(
            "64 journals vs 64 plain threads",
            Case("tether", KiB, writers=64),
            Case("plain", KiB, writers=64),
            0.9,
        ),
        Ratio(
            "16 journals vs SQLite WAL FULL, 16 writers",
            Case("tether", KiB, writers=16),
            Case("sqlite", KiB, writers=16),
            5.0,
        ),
        Ratio(
            "ceiling: bare thread hand-off vs plain sync loop",
            Case("handoff", KiB),
            Case("plain", KiB),
        ),
        Ratio(
            "ceiling: 64 bare hand-off threads vs 64 plain threads",
            Case("handoff", KiB, writers=64),
            Case("plain", KiB, writers=64),
        ),
        Ratio(
            "ceiling: 16 plain threads vs SQLite WAL FULL, 16 writers",
            Case("plain", KiB, writers=16),
            Case("sqlite", KiB, writers=16),
        ),
        Ratio("1 journal vs bare thread hand-off", tether_1k, Case("handoff", KiB)),
        Ratio("1 journal: io_uring vs writer threads", tether_1k, Case("tether-threads", KiB)),
        Ratio(
            "64 journals: io_uring vs writer threads",
            Case("tether", KiB, writers=64),
            Case("tether-threads", KiB, writers=64),
        ),
        Ratio(
            "64 journals vs 64 bare hand-off threads",
            Case("tether", KiB, writers=64),
            Case("handoff", KiB, writers=64),
        ),
        Ratio("aiofiles vs tether (1 KiB sequential)", Case("aiofiles", KiB), tether_1k),
        Ratio(
            "16 journals vs 16 plain threads",
            Case("tether", KiB, writers=16),
            Case("plain", KiB, writers=16),
        ),
        Ratio("1 journal vs SQLite WAL FULL, 1 writer", tether_1k, Case("sqlite", KiB)),
        Ratio(
            "1 KiB with default redaction vs without", Case("tether", KiB, redact=True), tether_1k
        ),
    ]
    ratios += [
        Ratio(f"{_size_label(s)}, group 1 vs plain sync loop", Case("tether", s), Case("plain", s))
        for s in RECORD_SIZES
        if s != KiB
    ]
    return ratios


# --- timing harness ------------------------------------------------------------------------------


class Tally:
    """Per-worker record counters read by the timer, and the flag that stops the workers."""

    def __init__(self, workers: int) -> None:
        self.counts = [0] * workers
        self.stop = False
        self._sample: Sample | None = None

    def total(self) -> int:
        return sum(self.counts)

    def finish(self, records: int, seconds: float) -> None:
        self._sample = Sample(records, seconds)
        self.stop = True

    def result(self) -> Sample:
        if self._sample is None:
            raise RuntimeError("the measurement window never closed")
        return self._sample


def _sample_sync(tally: Tally, window: Window) -> None:
    time.sleep(window.warmup)
    c0, t0 = tally.total(), time.perf_counter()
    time.sleep(window.duration)
    c1, t1 = tally.total(), time.perf_counter()
    tally.finish(c1 - c0, t1 - t0)


async def _sample_async(tally: Tally, window: Window) -> None:
    await anyio.sleep(window.warmup)
    c0, t0 = tally.total(), time.perf_counter()
    await anyio.sleep(window.duration)
    c1, t1 = tally.total(), time.perf_counter()
    tally.finish(c1 - c0, t1 - t0)


def run_threads(steps: Sequence[Callable[[], object]], window: Window, per_step: int) -> Sample:
    """Call each step in a loop on its own thread until the window closes."""
    tally = Tally(len(steps))
    errors: list[BaseException] = []

    def loop(i: int, step: Callable[[], object]) -> None:
        try:
            while not tally.stop:
                step()
                tally.counts[i] += per_step
        except BaseException as exc:
            errors.append(exc)
            tally.stop = True

    threads = [threading.Thread(target=loop, args=(i, s)) for i, s in enumerate(steps)]
    for t in threads:
        t.start()
    _sample_sync(tally, window)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return tally.result()


async def run_tasks(
    steps: Sequence[Callable[[], Awaitable[object]]], window: Window, per_step: int
) -> Sample:
    """Await each step in a loop in its own task until the window closes."""
    tally = Tally(len(steps))

    async def loop(i: int, step: Callable[[], Awaitable[object]]) -> None:
        while not tally.stop:
            await step()
            tally.counts[i] += per_step

    async with anyio.create_task_group() as tg:
        for i, step in enumerate(steps):
            tg.start_soon(loop, i, step)
        await _sample_async(tally, window)
    return tally.result()


# --- the variants --------------------------------------------------------------------------------


@functools.cache
def tool_result(size: int) -> ToolResult:
    """A ``ToolResult`` whose encoding (with a realistic ``seq`` and ``at``) is ``size`` bytes."""
    n = size
    while True:
        ev = ToolResult(call_id="call-0", ok=True, content="x" * n, seq=100_000, at=time.time())
        over = len(encode_event(ev)) - size
        if over <= 0:
            return ToolResult(call_id="call-0", ok=True, content="x" * n)
        n -= over


async def measure_tether(case: Case, root: Path, window: Window) -> Sample:
    redact = SecretRedactor() if case.redact else None
    ring = case.kind == "tether"  # "tether-threads": appends on the writer threads
    async with FileStore(root, redact=redact, blob_threshold=1 << 30, io_uring=ring) as store:
        journals = [await store.create(f"run-{i}") for i in range(case.writers)]
        group = [tool_result(case.record_size)] * case.group
        steps = [
            functools.partial(j.append, group) for j in journals for _ in range(case.appenders)
        ]
        sample = await run_tasks(steps, window, case.group)
        for j in journals:
            await j.aclose()
    return sample


def _write_and_sync(fd: int, data: bytes) -> None:
    os.write(fd, data)
    os.fdatasync(fd)


def measure_plain(case: Case, root: Path, window: Window) -> Sample:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    fds = [os.open(root / f"plain-{i}", flags, 0o644) for i in range(case.writers)]
    data = b"x" * case.record_size
    try:
        steps = [functools.partial(_write_and_sync, fd, data) for fd in fds]
        return run_threads(steps, window, 1)
    finally:
        for fd in fds:
            os.close(fd)


async def measure_aiofiles(case: Case, root: Path, window: Window) -> Sample:
    fdatasync = aiofiles.os.wrap(os.fdatasync)
    data = b"x" * case.record_size
    files = [await aiofiles.open(root / f"aio-{i}", "ab") for i in range(case.writers)]

    def step(f: Any) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            await f.write(data)
            await f.flush()
            await fdatasync(f.fileno())

        return write

    try:
        return await run_tasks([step(f) for f in files], window, 1)
    finally:
        for f in files:
            await f.close()


class _Handoff:
    """One file and one long-lived thread that writes, syncs and wakes the loop per record."""

    CHUNK = 1 << 20

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.loop = loop
        self.queue: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]] | None]
        self.queue = queue.SimpleQueue()
        self.end = self.allocated = 0
        self.thread = threading.Thread(target=self._work)
        self.thread.start()

    async def append(self, data: bytes) -> None:
        fut = self.loop.create_future()
        self.queue.put((data, fut))
        await fut

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            data, fut = item
            while self.end + len(data) > self.allocated:  # zeros ahead, as tether preallocates
                os.pwrite(self.fd, bytes(self.CHUNK), self.allocated)
                self.allocated += self.CHUNK
            os.pwrite(self.fd, data, self.end)
            self.end += len(data)
            os.fdatasync(self.fd)
            self.loop.call_soon_threadsafe(_resolve, fut)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        os.close(self.fd)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def measure_handoff(case: Case, root: Path, window: Window) -> Sample:
    loop = asyncio.get_running_loop()
    data = b"x" * case.record_size
    writers = [_Handoff(root / f"handoff-{i}", loop) for i in range(case.writers)]
    try:
        return await run_tasks([functools.partial(w.append, data) for w in writers], window, 1)
    finally:
        for w in writers:
            w.close()


SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events ("
    "run_id TEXT, seq INTEGER, kind TEXT, payload BLOB, PRIMARY KEY (run_id, seq))"
)


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class _SqliteWriter:
    """One run's writer: one autocommit ``INSERT`` (one transaction, one WAL sync) per event."""

    def __init__(self, conn: sqlite3.Connection, run_id: str, payload: bytes) -> None:
        self.conn, self.run_id, self.payload, self.seq = conn, run_id, payload, 0

    def __call__(self) -> None:
        self.conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)",
            (self.run_id, self.seq, "tool_result", self.payload),
        )
        self.seq += 1


def measure_sqlite(case: Case, root: Path, window: Window) -> Sample:
    path = root / "events.db"
    with _closing(_sqlite_connect(path)) as setup:
        setup.execute(SQLITE_SCHEMA)
    conns = [_sqlite_connect(path) for _ in range(case.writers)]
    payload = b"x" * case.record_size
    try:
        steps = [_SqliteWriter(c, f"run-{i}", payload) for i, c in enumerate(conns)]
        return run_threads(steps, window, 1)
    finally:
        for c in conns:
            c.close()


@contextmanager
def _closing(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    try:
        yield conn
    finally:
        conn.close()


def measure(case: Case, root: Path, window: Window) -> Sample:
    """Run one case in a fresh directory under ``root`` and remove the directory afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    try:
        if case.kind in ("tether", "tether-threads"):
            return anyio.run(measure_tether, case, workdir, window)
        if case.kind == "aiofiles":
            return anyio.run(measure_aiofiles, case, workdir, window)
        if case.kind == "plain":
            return measure_plain(case, workdir, window)
        if case.kind == "handoff":
            return anyio.run(measure_handoff, case, workdir, window)
        return measure_sqlite(case, workdir, window)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_all(cases: list[Case], root: Path, window: Window, repeats: int) -> dict[Case, Result]:
    """Every case ``repeats`` times, alternating the order between repeats."""
    results = {c: Result(c) for c in cases}
    for rep in range(repeats):
        order = cases if rep % 2 == 0 else cases[::-1]
        for case in order:
            sample = measure(case, root, window)
            results[case].rates.append(sample.rate)
            print(
                f"  [{rep + 1}/{repeats}] {case.key:<34} {sample.rate:>10.0f} rec/s",
                file=sys.stderr,
                flush=True,
            )
    return results


# --- environment and report ----------------------------------------------------------------------


def format_results(results: dict[Case, Result]) -> str:
    lines = [f"{'case':<36} {'records/s':>11} {'MB/s':>9} {'min..max rec/s':>20}"]
    for r in results.values():
        spread = f"{min(r.rates):.0f}..{max(r.rates):.0f}"
        lines.append(f"{r.case.key:<36} {r.records_per_s:>11.0f} {r.mb_per_s:>9.2f} {spread:>20}")
    return "\n".join(lines)


def format_ratios(ratios: list[Ratio], results: dict[Case, Result]) -> str:
    lines = [f"{'ratio (of medians)':<52} {'value':>7} {'paired':>7} {'target':>8}  status"]
    for q in ratios:
        met = q.met(results)
        target = f">={q.target:.1f}x" if q.target is not None else ""
        status = "" if met is None else ("met" if met else "MISSED")
        value, paired = q.value(results), q.paired(results)
        lines.append(f"{q.name:<52} {value:>6.2f}x {paired:>6.2f}x {target:>8}  {status}")
    return "\n".join(lines)


def report_json(
    results: dict[Case, Result], ratios: list[Ratio], info: dict[str, Any], args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "machine": info,
        "settings": args,
        "results": [r.to_json() for r in results.values()],
        "ratios": [
            {
                "name": q.name,
                "numerator": q.numerator.key,
                "denominator": q.denominator.key,
                "value": round(q.value(results), 3),
                "paired_median": round(q.paired(results), 3),
                "target": q.target,
                "met": q.met(results),
            }
            for q in ratios
        ],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="short windows, two repeats")
    p.add_argument("--dir", type=Path, default=None, help="where to write (default: near repo)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--repeats", type=int, default=None, help="override the number of repeats")
    p.add_argument("--duration", type=float, default=None, help="override seconds per window")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    duration = args.duration or (0.3 if args.quick else 1.5)
    repeats = args.repeats or (2 if args.quick else 3)
    window = Window(warmup=min(0.2, duration / 3), duration=duration)
    cases, ratios = build_cases(), build_ratios()
    with scratch_dir(args.dir, "tether-bench-") as root:
        info = machine_info(root)
        if info["filesystem"] in {"tmpfs", "ramfs"}:
            print(
                f"warning: {root} is on {info['filesystem']}; fsync is free there", file=sys.stderr
            )
        print(
            f"{len(cases)} cases x {repeats} repeats on {root} ({info['filesystem']})",
            file=sys.stderr,
        )
        started = time.perf_counter()
        results = run_all(cases, root, window, repeats)
        elapsed = time.perf_counter() - started
    settings = {
        "quick": args.quick,
        "duration_s": duration,
        "warmup_s": window.warmup,
        "repeats": repeats,
        "elapsed_s": round(elapsed, 1),
    }
    print(format_results(results))
    print()
    print(format_ratios(ratios, results))
    print(f"\n{elapsed:.0f} s; filesystem {info['filesystem']} on {info['device']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report_json(results, ratios, info, settings), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
