"""PostgreSQL driver choice: asyncpg against psycopg 3 (async), measured side by side in one run.

Run ``python bench/pg_driver.py [--repeats N] [--duration S] [--synchronous-commit off]`` after
``pip install -e '.[bench]'`` (psycopg and its pool are needed only here).

One throwaway PostgreSQL server (default settings, fsync on), one schema per variant, one pool
of 16 autocommit connections per variant shared by every case; every operation checks a
connection out and back in. ``asyncpg`` is ``asyncpg.create_pool`` as shipped (its release
runs a reset query: one more round trip per checkout), ``asyncpg-noreset`` the same pool with
a no-op ``reset``, ``psycopg`` a ``psycopg_pool.AsyncConnectionPool`` (sends nothing on release).

Cases: fenced appends of one 1 KiB event per statement from 1, 16 and 64 concurrent runs (one
task per run; the 64 share the 16 connections), and reads of one run of 1,000 events (psycopg
asks for binary results, as asyncpg always does). Each case runs every variant in turn, the
order reversed on odd repeats; the table gives the median rate of the repeats. With
``--synchronous-commit off`` (a session setting) a commit no longer waits for the WAL flush,
which leaves the drivers' own costs; the default keeps PostgreSQL's durable commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import asyncpg
import psycopg
import psycopg_pool
from _machine import machine_info

from tether.testing._pgserver import PostgresServer

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "pg_driver.json"

POOL_SIZE = 16
PAYLOAD = b"x" * 1024
READ_EVENTS = 1000
OWNER, EPOCH = "bench", 1

SCHEMA = (
    "CREATE TABLE runs (run_id text PRIMARY KEY, status text NOT NULL DEFAULT 'active', "
    "next_seq bigint NOT NULL DEFAULT 0, owner text, epoch bigint NOT NULL DEFAULT 0, "
    "expires_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE events (run_id text NOT NULL REFERENCES runs ON DELETE CASCADE, "
    "seq bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (run_id, seq))",
)
CREATE_RUN = "INSERT INTO runs (run_id, owner, epoch) VALUES ($1, $2, $3)"
APPEND = """
WITH lease AS (
  UPDATE runs SET next_seq = $4 + cardinality($5::bytea[]), updated_at = now()
  WHERE run_id = $1 AND epoch = $2 AND owner = $3 AND next_seq = $4
  RETURNING run_id)
INSERT INTO events (run_id, seq, payload)
SELECT lease.run_id, $4 + t.ord - 1, t.p
FROM lease, unnest($5::bytea[]) WITH ORDINALITY AS t(p, ord)
"""
READ = "SELECT seq, payload FROM events WHERE run_id = $1 ORDER BY seq"


def to_psycopg(sql: str) -> str:
    """``$n`` placeholders as psycopg's named ``%(pn)s`` (a repeated ``$4`` is one parameter)."""
    return re.sub(r"\$(\d+)", r"%(p\1)s", sql)


def named(*args: object) -> dict[str, object]:
    return {f"p{i}": a for i, a in enumerate(args, start=1)}


def _check_appended(run_id: str, inserted: int, expected: int) -> None:
    if inserted != expected:
        raise RuntimeError(f"fenced append to {run_id} inserted {inserted} of {expected} rows")


async def _no_reset(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    return None


class Asyncpg:
    def __init__(self, name: str, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        self.name, self.pool = name, pool

    @classmethod
    async def open(cls, dsn: str, schema: str, sync: str, *, reset: bool) -> Asyncpg:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=POOL_SIZE,
            max_size=POOL_SIZE,
            server_settings={"search_path": schema, "synchronous_commit": sync},
            reset=None if reset else _no_reset,
        )
        return cls("asyncpg" if reset else "asyncpg-noreset", pool)

    async def execute(self, sql: str, *args: object) -> None:
        await self.pool.execute(sql, *args)

    async def append(self, run_id: str, seq: int, payloads: list[bytes]) -> None:
        status: str = await self.pool.execute(APPEND, run_id, EPOCH, OWNER, seq, payloads)
        _check_appended(run_id, int(status.rsplit(" ", 1)[1]), len(payloads))

    async def read(self, run_id: str) -> int:
        return len(await self.pool.fetch(READ, run_id))

    async def close(self) -> None:
        await self.pool.close()


PgPool: TypeAlias = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]


class Psycopg:
    name = "psycopg"

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, dsn: str, schema: str, sync: str) -> Psycopg:
        options = f"-c search_path={schema} -c synchronous_commit={sync}"
        kwargs = {"autocommit": True, "options": options}
        pool: PgPool = psycopg_pool.AsyncConnectionPool(
            dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, kwargs=kwargs, open=False
        )
        await pool.open(wait=True)
        return cls(pool)

    async def execute(self, sql: str, *args: object) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(to_psycopg(sql).encode(), named(*args) if args else None)

    async def append(self, run_id: str, seq: int, payloads: list[bytes]) -> None:
        params = named(run_id, EPOCH, OWNER, seq, payloads)
        async with self.pool.connection() as conn:
            cur = await conn.execute(PG_APPEND, params)
            _check_appended(run_id, cur.rowcount, len(payloads))

    async def read(self, run_id: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(PG_READ, named(run_id), binary=True)
            return len(await cur.fetchall())

    async def close(self) -> None:
        await self.pool.close()


PG_APPEND, PG_READ = to_psycopg(APPEND).encode(), to_psycopg(READ).encode()
Driver = Asyncpg | Psycopg


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
                for d in drivers if rep % 2 == 0 else drivers[::-1]:
                    r = await measure(d, case, rep, warmup, window)
                    rates[case.key].setdefault(d.name, []).append(r)
                    print(f"  {case.label:<32} {d.name:<16} {r:10,.0f}/s", file=sys.stderr)
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--repeats", type=int, default=3, help="repeats per case and driver")
    p.add_argument("--duration", type=float, default=2.0, help="seconds counted per window")
    p.add_argument("--warmup", type=float, default=0.3, help="seconds before each window")
    p.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="session setting; 'off' takes the WAL flush wait out to show driver overhead",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    with PostgresServer() as server:
        assert server.dir is not None
        info = machine_info(server.dir)
        with psycopg.connect(server.dsn) as conn:
            info["postgres"] = conn.info.parameter_status("server_version")
        sync = args.synchronous_commit
        rates = asyncio.run(run_all(server.dsn, sync, args.repeats, args.warmup, args.duration))
    elapsed = time.perf_counter() - started
    results = {c.key: {"label": c.label, **summary(rates[c.key])} for c in CASES}
    print(format_table(results))
    where = f"cluster on {info['filesystem']} ({info['device']})"
    print(f"\n{elapsed:.0f} s; {where}, fsync on, synchronous_commit {sync}")
    versions = {"asyncpg": asyncpg.__version__, "psycopg": psycopg.__version__}
    report = {
        "machine": info | {"drivers": versions, "psycopg_pool": psycopg_pool.__version__},
        "settings": vars(args) | {"pool_size": POOL_SIZE, "elapsed_s": round(elapsed, 1)},
        "summary": "median of repeats; variants interleaved, order reversed on odd repeats",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
