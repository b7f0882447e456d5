"""Worker processes over one store: runs created ahead, served by 1 or 2 ``Supervisor``s.

The parent creates the runs (a ``RunStarted`` with the app's manifest, nothing started), starts
the workers (``postgres_store.py --child-worker``), tells them to go once each has its store
open, and stops the clock when the last run is reported done; each worker reports the runs it
saw finish on its stdout.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
from _agent import STEPS, TOOL_CALLS, new_model, tether_tools
from _harness import BENCH, REPO_ROOT
from _pg_results import VARIANTS, Sample
from _pg_server import Bench, Place, add_counters
from anyio.streams.buffered import BufferedByteReceiveStream

import tether
from tether.supervisor import Supervisor, fold

SCRIPT = BENCH / "postgres_store.py"
CREATE_CONCURRENCY = 16
WORKER_TIMEOUT = 180.0


async def create_runs(place: Place, ids: Sequence[str]) -> None:
    """Runs that exist durably but that no process has started: any worker may take them.

    Created as a web handler would: a supervisor that does not resume runs, starting each
    without driving it (``drive=False``), so the manifest is the one every worker checks.
    """
    async with place.open() as store:
        sup = Supervisor(
            store, model=new_model(), tools=tether_tools(approval_first=False), resume=False
        )
        limiter = anyio.CapacityLimiter(CREATE_CONCURRENCY)

        async def make(run_id: str) -> None:
            async with limiter:
                await sup.start(run_id, f"job {run_id}", drive=False)

        async with sup, anyio.create_task_group() as tg:
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
    argv = [sys.executable, str(SCRIPT), "--child-worker", *place.child_args]
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
