"""What the driver bench measures: fenced appends from 1, 16 and 64 runs, and reads.

Each case runs every driver in turn, the order reversed on odd repeats; a rate is operations
per second over a window after a warm-up, each operation checking a connection out and back.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from _harness import alternate, say
from _pg_drivers import (
    CREATE_RUN,
    EPOCH,
    OWNER,
    PAYLOAD,
    POOL_SIZE,
    READ_EVENTS,
    SCHEMA,
    Asyncpg,
    Driver,
    Psycopg,
)


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    runs: int  # concurrent appending runs; 0 = the read case


CASES = (
    Case("append_1", "append 1 KiB, 1 run", 1),
    Case("append_16", "append 1 KiB, 16 runs", 16),
    Case("append_64", f"append 1 KiB, 64 runs (pool {POOL_SIZE})", 64),
    Case("read_1000", f"read {READ_EVENTS:,} events", 0),
)


async def rate(
    steps: Sequence[Callable[[], Awaitable[None]]], warmup: float, window: float
) -> float:
    """Operations per second of the steps, each awaited in a loop in its own task."""
    counts, stop = [0] * len(steps), asyncio.Event()

    async def loop(i: int, step: Callable[[], Awaitable[None]]) -> None:
        while not stop.is_set():
            await step()
            counts[i] += 1

    tasks = [asyncio.create_task(loop(i, s)) for i, s in enumerate(steps)]
    try:
        await asyncio.sleep(warmup)
        c0, t0 = sum(counts), time.perf_counter()
        await asyncio.sleep(window)
        c1, t1 = sum(counts), time.perf_counter()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return (c1 - c0) / (t1 - t0)


def appender(driver: Driver, run_id: str) -> Callable[[], Awaitable[None]]:
    seq = 0

    async def step() -> None:
        nonlocal seq
        await driver.append(run_id, seq, [PAYLOAD])
        seq += 1

    return step


def reader(driver: Driver) -> Callable[[], Awaitable[None]]:
    async def step() -> None:
        if (n := await driver.read("read")) != READ_EVENTS:
            raise RuntimeError(f"read {n} events, expected {READ_EVENTS}")

    return step


async def setup(driver: Driver, schema: str) -> None:
    for sql in (f"DROP SCHEMA IF EXISTS {schema} CASCADE", f"CREATE SCHEMA {schema}", *SCHEMA):
        await driver.execute(sql)
    await driver.execute(CREATE_RUN, "read", OWNER, EPOCH)
    await driver.append("read", 0, [PAYLOAD] * READ_EVENTS)


async def measure(driver: Driver, case: Case, rep: int, warmup: float, window: float) -> float:
    if case.runs == 0:
        return await rate([reader(driver)], warmup, window)
    run_ids = [f"{case.key}-{rep}-{i}" for i in range(case.runs)]
    for run_id in run_ids:
        await driver.execute(CREATE_RUN, run_id, OWNER, EPOCH)
    return await rate([appender(driver, r) for r in run_ids], warmup, window)


Rates = dict[str, dict[str, list[float]]]  # case key -> variant -> rate of each repeat


async def run_all(dsn: str, sync: str, repeats: int, warmup: float, window: float) -> Rates:
    drivers: list[Driver] = [
        await Asyncpg.open(dsn, "bench_asyncpg", sync, reset=True),
        await Asyncpg.open(dsn, "bench_asyncpg_noreset", sync, reset=False),
        await Psycopg.open(dsn, "bench_psycopg", sync),
    ]
    try:
        for d in drivers:
            await setup(d, f"bench_{d.name.replace('-', '_')}")
        rates: Rates = {c.key: {} for c in CASES}
        for case in CASES:
            for rep in range(repeats):
                for d in alternate(drivers, rep):
                    r = await measure(d, case, rep, warmup, window)
                    rates[case.key].setdefault(d.name, []).append(r)
                    say(f"  {case.label:<32} {d.name:<16} {r:10,.0f}/s")
        return rates
    finally:
        for d in drivers:
            await d.close()


def summary(by_variant: dict[str, list[float]]) -> dict[str, Any]:
    """Median and every rate of each variant, and the ratios of the medians to psycopg's."""
    med = {name: statistics.median(rs) for name, rs in by_variant.items()}
    out: dict[str, Any] = {
        n: {"median": round(m, 1), "rates": [round(r, 1) for r in by_variant[n]]}
        for n, m in med.items()
    }
    for name in ("asyncpg", "asyncpg-noreset"):
        out[f"{name}/psycopg"] = round(med[name] / med["psycopg"], 3)
    return out


def format_table(results: dict[str, dict[str, Any]]) -> str:
    cols = ("asyncpg", "asyncpg-noreset", "psycopg", "asyncpg/psycopg", "asyncpg-noreset/psycopg")
    lines = ["case (median ops/s)".ljust(32) + "".join(f"{c:>{len(c) + 2}}" for c in cols)]
    for c in CASES:
        r = results[c.key]
        cells = [f"{r[n]['median']:,.0f}" for n in cols[:3]] + [f"{r[n]:.2f}" for n in cols[3:]]
        pairs = zip(cells, cols, strict=True)
        lines.append(c.label.ljust(32) + "".join(f"{v:>{len(n) + 2}}" for v, n in pairs))
    return "\n".join(lines)
