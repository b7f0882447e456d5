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
import sys
import time
from collections.abc import Sequence

from _harness import parser, say, write_results
from _machine import machine_info

# No public way to start a throwaway server: the tests use this one too.
from tether.testing import PostgresServer


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__, out="pg_driver.json")
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
    try:  # psycopg and its pool come with the bench extra only
        from _pg_driver_cases import CASES, format_table, run_all, summary
        from _pg_drivers import POOL_SIZE, server_version, versions
    except ImportError as exc:
        say(f"pg_driver.py needs psycopg 3 and psycopg-pool: pip install -e '.[bench]' ({exc})")
        return 2
    started = time.perf_counter()
    with PostgresServer() as server:
        assert server.dir is not None
        info = machine_info(server.dir)
        info["postgres"] = server_version(server.dsn)
        sync = args.synchronous_commit
        rates = asyncio.run(run_all(server.dsn, sync, args.repeats, args.warmup, args.duration))
    elapsed = time.perf_counter() - started
    results = {c.key: {"label": c.label, **summary(rates[c.key])} for c in CASES}
    print(format_table(results))
    where = f"cluster on {info['filesystem']} ({info['device']})"
    print(f"\n{elapsed:.0f} s; {where}, fsync on, synchronous_commit {sync}")
    report = {
        "machine": info | versions(),
        "settings": vars(args) | {"pool_size": POOL_SIZE, "elapsed_s": round(elapsed, 1)},
        "summary": "median of repeats; variants interleaved, order reversed on odd repeats",
        "results": results,
    }
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
