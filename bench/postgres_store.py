"""PostgresStore next to FileStore: appends, supervisor steps and worker processes, side by side.

Run ``python bench/postgres_store.py [--quick] [--dir DIR] [--out FILE] [--repeats N]
[--worker-runs N]``.

One throwaway PostgreSQL server (default settings, fsync on, plus ``track_wal_io_timing`` so
that WAL syncs are timed; its cluster in the system temp directory) and one scratch directory
for the file store, both on this machine's disk. Every case runs on a fresh store (a new
directory, a new schema) with redaction off, and the stores take turns: for each case the file
store and PostgreSQL run back to back, the case list walked forwards on even repeats and
backwards on odd ones, so that drift in a shared machine's disk or CPU hits both sides alike.
The table gives the median of the repeats, the ratio of the medians, and the median of each
repeat's ratio (``paired``: the two measured back to back). Before the first case, each store
takes half a second of appends that are not counted.

What is measured (``_pg_measure``, ``_pg_workers``): ``append``, appends of one 1 KiB event
from 1, 16 and 64 runs at once; ``steps``, the supervisor bench's scripted agent (nine steps a
run, no model latency) with N runs at once; ``workers``, runs created in the store but not
started, then served by 1 or 2 worker processes until every run is done. Two file-store workers
share one directory through the journals' locks, two PostgreSQL workers one schema through
leases.

A third column, ``pg async``, repeats the append and step cases on a database with
``synchronous_commit = off``, where a commit does not wait for its WAL flush: the difference
to ``postgres`` is what waiting for that flush costs. Per case the report also gives CPU time
per operation, of this process (the workers' own, for ``workers``) and of every PostgreSQL
process, and from PostgreSQL's statistics the committed transactions, WAL syncs and WAL bytes
per operation (over the whole sample, warm-up included) and the mean time of one WAL sync.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from _agent import STEPS
from _harness import parser, say, workspace, write_results
from _machine import mount_of
from _pg_measure import EVENT, build_cases, run_all
from _pg_results import Case, Result, Settings, Variant, format_costs, format_table, results_json
from _pg_server import SERVER_SETTINGS, open_bench
from _pg_workers import child_worker

# No public way to start a throwaway server: the tests use this one too.
from tether.testing import PostgresServer


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__, out="postgres_store.json", dir_help="where the file store writes")
    p.add_argument("--quick", action="store_true", help="one repeat, short windows, 100 runs")
    p.add_argument("--repeats", type=int, default=None, help="repeats of every case (default 3)")
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


async def measure_all(
    server: PostgresServer, root: Path, settings: Settings
) -> tuple[dict[tuple[Case, Variant], Result], dict[str, Any]]:
    async with open_bench(server.dsn, server.data_dir, root, settings) as (bench, facts):
        return await run_all(bench, build_cases()), facts


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_worker:
        anyio.run(child_worker, *args.child_worker)
        return 0
    settings = settings_of(args)
    cases = build_cases()
    started = time.perf_counter()
    with (
        workspace(args.dir, "tether-pgstore-", packages=("asyncpg",)) as (root, info),
        PostgresServer(settings=SERVER_SETTINGS) as server,
    ):
        dev, mnt, fstype = mount_of(server.data_dir)
        info["postgres_data"] = {"device": dev, "mount_point": mnt, "filesystem": fstype}
        say(
            f"file store on {root} ({info['filesystem']} on {info['device']}); "
            f"PostgreSQL on {server.data_dir} ({fstype} on {dev})"
        )
        results, facts = anyio.run(measure_all, server, root, settings)
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
        say(f"\nworker log (tail):\n{worker_log}")
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
        "results": results_json(results, cases),
    }
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
