"""Appends and supervisor steps on each store, and the order the cases take turns in.

- ``append``: appends of one 1 KiB event (``ModelResponse``) each, from 1, 16 and 64 runs at
  once, each run appended to by its own task, one append after another; counted during a fixed
  window after a short warm-up.
- ``steps``: the supervisor bench's scripted agent (nine steps a run, no model latency) with N
  runs at once: start N runs, wait for all of them, again until the window is over (after one
  round of warm-up).
- ``workers``: see ``_pg_workers``.
"""

from __future__ import annotations

import time

import anyio
from _agent import TOOL_CALLS, new_model, tether_tools
from _harness import alternate, say
from _pg_results import UNITS, VARIANTS, Case, Result, Sample, Variant
from _pg_server import Bench, Place, add_counters
from _pg_workers import create_runs, measure_workers
from _resources import Sampler, fan_out

import tether
from tether.journal import ModelResponse

RUN_COUNTS = (1, 16, 64)
WORKER_COUNTS = (1, 2)
EVENT = ModelResponse(message={"role": "assistant", "content": "x" * 1000})
WARMUP_WINDOW = 0.5  # seconds of appends on each store before the first measurement


async def measure_appends(bench: Bench, place: Place, runs: int, window: float) -> Sample:
    before = await bench.counters(place.variant)
    ids = [f"run-{i:03d}" for i in range(runs)]
    await create_runs(place, ids)
    async with place.open() as store:
        handles = [await store.open(rid) for rid in ids]
        count = 0
        stop = False

        async def writer(handle: tether.JournalHandle) -> None:
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
        for i, case in enumerate(alternate(cases, rep)):
            for variant in alternate(case.variants, rep + i):
                res = results[(case, variant)]
                try:
                    sample = await measure(bench, case, variant)
                    sample.repeat = rep
                except Exception as exc:
                    res.failures.append(f"{type(exc).__name__}: {exc}")
                    say(f"  {case.key:<10} {variant:<9} failed: {exc}")
                    continue
                if sample.seconds > 0:
                    res.samples.append(sample)
                else:
                    res.failures.extend(sample.notes)
                notes = "; ".join(sample.notes)
                say(
                    f"  {case.key:<10} {variant:<9} {sample.rate:>9.0f} {UNITS[case.kind]}"
                    f"{'  ' + notes if notes else ''}"
                )
    return results
