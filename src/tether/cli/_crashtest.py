"""``tether crashtest MODULE:SCENARIO``: kill an agent at every crash point, prove it safe."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from ._progress import CaseProgress


def add_crashtest_command(commands: Any) -> None:
    cmd = commands.add_parser(
        "crashtest",
        help="kill an agent with SIGKILL at every crash point, resume it, compare",
        description="Run a scenario once uninterrupted (the baseline), then once per crash "
        "point it passes, killing a fresh child process there with SIGKILL and resuming the "
        "run in fresh processes. Each case's final status, final answer, side effects and "
        "model calls are compared with the baseline. SCENARIO is a factory "
        "'scenario(root: Path) -> tether.testing.Scenario'; MODULE is imported with the "
        "current directory on the path. Exit 0 when every case is safe, 1 on any duplicate "
        "side effect, lost journal record, differing answer, unexplained extra model call or "
        "failed process, 2 when the scenario cannot be loaded or its baseline run fails. "
        "With --store URL the runs live in that PostgreSQL database, each case in a schema "
        "of its own.",
    )
    cmd.add_argument("target", metavar="MODULE:SCENARIO", help="e.g. examples.mail:scenario")
    cmd.add_argument("--json", action="store_true", help="print one JSON report object")
    cmd.add_argument(
        "--double",
        nargs="?",
        type=int,
        const=6,
        default=0,
        metavar="N",
        help="also kill the resuming process, half-way through, in N sampled cases (default 6)",
    )
    cmd.add_argument(
        "--workers", type=int, default=2, metavar="N", help="cases run at once (default 2)"
    )
    cmd.add_argument(
        "--points",
        metavar="P,P",
        help="kill only at these crash points (model_answered, model_saved, tool_started, "
        "tool_returned, result_saved, parked, inbox_folded, contract_taken, gc_set_aside); "
        "all by default",
    )
    cmd.add_argument(
        "--after-deploy",
        action="store_true",
        help="kill only in the processes that run the scenario's deployed application (its "
        "deploy), from the first one on: the crash points around a deploy and a repin",
    )
    cmd.add_argument(
        "--root",
        metavar="DIR",
        help="keep every case's store, services and traces in DIR (new or empty); by default "
        "a temporary directory, removed afterwards. With --store, the cases' schemas are kept "
        "too (each case's schema.txt names its schema)",
    )
    cmd.add_argument(
        "--store",
        metavar="URL",
        help="run the cases in this PostgreSQL database (postgresql://user@host:port/db), "
        "each in a new schema crash_<random>_<n>, dropped afterwards unless --root is given; "
        "by default each case has a file store in its directory",
    )
    cmd.set_defaults(handler=_crashtest)


def _crashtest(args: argparse.Namespace) -> int:
    from ..testing import CrashtestError, run_crashtest
    from ..testing._harness import Stopped, redact_url, stop_children

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so examples.x:scenario imports

    def banner() -> None:  # once the scenario and the options are known to work
        if not args.json:
            where = f" on {redact_url(args.store)}" if args.store else ""
            print(
                f"crashtest {args.target}{where}: baseline, then one case per crash point ...",
                flush=True,
            )

    terminated = []

    def on_term(signum: int, frame: object) -> None:
        terminated.append(signum)
        stop_children()  # the cases' processes: a signal reaches this process alone
        raise KeyboardInterrupt  # the cases' threads end; their directories are removed

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with CaseProgress(sys.stdout, first="baseline", enabled=not args.json) as progress:
            report = run_crashtest(
                args.target,
                double=args.double,
                workers=args.workers,
                points=args.points.split(",") if args.points else None,
                after_deploy=args.after_deploy,
                root=args.root,
                store=args.store,
                on_case=progress.finished,
                on_start=banner,
            )
    except CrashtestError as exc:
        print(f"tether: crashtest: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Stopped):
        stop_children()
        print(
            "tether: crashtest: stopped before it finished; its processes were killed and its "
            "temporary files removed (with --root, the cases so far are kept there)",
            file=sys.stderr,
        )
        return 128 + (terminated[0] if terminated else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print()
        print(report.table())
        print()
        print(report.summary())
    return 0 if report.ok else 1
