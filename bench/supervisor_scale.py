"""Many runs in one process: tether's Supervisor next to the seeds' SQLite design and frameworks.

Run ``python bench/supervisor_scale.py [--quick] [--dir DIR] [--out FILE] [--png FILE]``.

Every system runs the same scripted agent (``_agent``): five model answers (``tool_use`` A, B,
C, D, then a final text), so nine steps per run (five model calls, four tool calls), each tool
returning a small dict, with a model latency of 0 or 50 ms (a sleep before the scripted
answer). All runs of a case start at once in one process and the case ends when every run has
finished. Each case runs in a fresh child process, so its peak RSS and descriptor counts are
its own.

Where a case is compared (up to ``--baseline-max`` runs), the cases of that point run
``--repeat`` times (default 3), taking turns in an order reversed on every other repetition
(tether, tether-nosync, sqlite, langgraph, dbos, then dbos, ..., tether), and each reports its
median try: this machine drifts by tens of percent over minutes, and taking turns spreads the
drift over every system instead of onto whichever ran last.

What is compared (``_scale_tether``, ``peers/``):

- ``tether``: ``Supervisor`` over a ``FileStore`` (redaction off, no sweeper); one journal per
  run, every record ``fdatasync``'d before the run goes on.
- ``tether-nosync``: the same with every sync replaced by nothing (through the ``FileOps`` seam,
  so on the writer threads even where ``tether`` appends through ``io_uring``). Not durable: how
  fast the supervisor goes when the disk costs nothing, the CPU-bound ceiling of ``tether``.
- ``sqlite``: the seeds' design: one SQLite database (WAL, ``synchronous=FULL``), one row and
  one commit per event, from a pool of 16 threads; one asyncio task per run.
- ``langgraph``: a two-node ``StateGraph`` checkpointed by ``AsyncSqliteSaver`` with
  ``durability="sync"``.
- ``dbos``: a DBOS workflow whose model and tool calls are ``@DBOS.step``s, on SQLite.

LangGraph and DBOS are imported only when installed (``pip install langgraph
langgraph-checkpoint-sqlite aiosqlite dbos``); a case whose package is missing is recorded as
skipped. The plot needs matplotlib, also optional.

Reported per case: wall time, steps/s, fsyncs/s (tether: ``FileStore.syncs``), peak RSS, the
RSS above the case's starting point per run in flight when the most runs were in flight, and
the most descriptors open at once; per point with a model latency, the latency ceiling and
each system's share of it (``_scale_report``); the ``parked`` cases' RSS, descriptors and
Python heap per run waiting for a person.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from _agent import MODEL_CALLS, STEPS, TOOL_CALLS
from _harness import RESULTS, alternate, median_try, parser, say, workspace, write_results
from _scale_plan import Case, build_cases, rounds_of, run_case, spawn_case
from _scale_report import (
    ceilings,
    format_ceilings,
    format_parked,
    format_ratios,
    format_results,
    plot,
    ratios,
    targets,
)
from _scale_result import CaseResult
from _scale_tether import PARK_BATCH
from peers import INSTALL
from peers._sqlite import THREADS as SQLITE_THREADS

PACKAGES = ("langgraph", "langgraph-checkpoint-sqlite", "aiosqlite", "dbos")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__, out="supervisor_scale.json", dir_help="where to write (default: near repo)")
    p.add_argument("--quick", action="store_true", help="10, 100 and 1,000 runs only")
    p.add_argument("--png", type=Path, default=RESULTS / "supervisor_scale.png", help="plot file")
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
        help="times each compared case runs, taking turns with the others (median reported)",
    )
    p.add_argument(
        "--child", nargs=3, metavar=("KIND", "LATENCY_MS", "RUNS"), help=argparse.SUPPRESS
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, lat, runs = args.child
        print(json.dumps(run_case(kind, int(lat), int(runs), args.dir).to_json()))
        return 0
    cases = build_cases(args.quick, args.baseline_max, args.dbos_max)
    if args.only:
        kinds = set(args.only.split(","))
        cases = [c for c in cases if c.kind in kinds]
    results: list[CaseResult] = []
    with workspace(args.dir, "tether-scale-", packages=PACKAGES) as (root, info):
        say(f"{len(cases)} cases on {root} ({info['filesystem']}); optional peers: {INSTALL}")
        started = time.perf_counter()
        for group in rounds_of(cases, args.repeat, args.baseline_max):
            tries: dict[Case, list[CaseResult]] = {}
            for rep in range(group.repeat):
                for case in alternate(group.cases, rep):
                    res = spawn_case(case, root)
                    tries.setdefault(case, []).append(res)
                    say(f"  {case.key:<26} {res.skipped or f'{res.steps_per_s:.0f} steps/s'}")
            results += [_median(tries[case]) for case in group.cases]
        elapsed = time.perf_counter() - started
    rats, ceils = ratios(results), ceilings(results)
    tgts = targets(results, rats, ceils)
    print(format_results(results))
    print()
    print(format_parked(results))
    print()
    print(format_ceilings(ceils))
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
            "latency_ceiling": "runs / latency x steps_per_run / model_calls_per_run",
            "sqlite_threads": SQLITE_THREADS,
            "park_batch": PARK_BATCH,
            "repeat": args.repeat,
            "elapsed_s": round(elapsed, 1),
        },
        "results": [r.to_json() for r in results],
        "ratios": rats,
        "ceilings": ceils,
        "targets": [asdict(t) for t in tgts],
    }
    write_results(args.out, report)
    say(plot(results, args.png) or f"plot: {args.png}")
    return 0


def _median(tries: list[CaseResult]) -> CaseResult:
    """The try with the median steps/s, every try's steps/s in ``samples``; a failed try
    makes the case failed."""
    failed = [r for r in tries if not r.ok]
    if failed:
        return failed[0]
    chosen = median_try(tries, key=lambda r: r.steps_per_s)
    chosen.samples = [round(r.steps_per_s, 1) for r in tries]
    return chosen


if __name__ == "__main__":
    sys.exit(main())
