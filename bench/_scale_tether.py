"""tether's cases in the supervisor bench: runs to the end, runs with syncs stubbed out, and
runs parked on an approval (what a waiting run holds)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from _agent import TOOL_CALLS, SlowModel, tether_tools
from _nosync import NoSyncOps
from _resources import Sampler, settle, timed_fan_out
from _scale_result import CaseResult

import tether

PARK_BATCH = 200
"""Parked runs are started this many at a time, so that transient memory stays small."""


async def case_tether(res: CaseResult, root: Path, *, sync: bool = True) -> None:
    """``Supervisor`` over a ``FileStore`` (redaction off, no sweeper), all runs at once; with
    ``sync=False`` every sync is stubbed out (``tether-nosync``: the CPU-bound ceiling)."""
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
        res.wall_s = await timed_fan_out(res.runs, one, sampler)
        res.fsyncs = store.syncs - syncs0 if sync else 0
        res.notes.append("io_uring" if store.uses_io_uring else "writer threads")
    res.completed = sum(1 for s in done if s is tether.RunStatus.DONE)
    res.steps = model.calls + TOOL_CALLS * res.completed
    res.take(sampler)


async def case_parked(res: CaseResult, root: Path, *, heap: bool) -> None:
    """Runs whose first tool needs approval, started ``PARK_BATCH`` at a time until every run
    waits for a person; then what the parked runs hold: RSS and descriptors, or with ``heap``
    the Python heap they retain (``tracemalloc``, which slows everything down)."""
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

        res.wall_s = await timed_fan_out(res.runs, one, sampler, batch=PARK_BATCH)
        res.parked_rss, res.parked_fds = settle()
        if heap:
            res.heap_parked = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
        res.completed = sum(1 for s in statuses if s is tether.RunStatus.WAITING_FOR_APPROVAL)
        res.steps = model.calls - 1
    res.take(sampler)
