"""``tether worker --root DIR --app MODULE:FACTORY``: serve a store's runs until told to stop."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import anyio


def add_worker_commands(commands: Any) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a supervisor over a store until SIGTERM/SIGINT",
        description="Resume every unfinished run in the store, take over runs whose owner "
        "process died, continue parked runs when a decision arrives, until SIGTERM or SIGINT. "
        "MODULE:FACTORY names a function returning a tether.WorkerApp (model, tools, "
        "supervisor options); the current directory is importable.",
    )
    worker.add_argument("--root", required=True, help="the store's directory")
    worker.add_argument("--app", required=True, metavar="MODULE:FACTORY", help="the application")
    worker.add_argument(
        "--sweep-interval",
        type=float,
        default=None,
        help="seconds between looks for runs to take over (default: the app's, else 5)",
    )
    worker.add_argument("--max-active-runs", type=int, default=None, help="runs advanced at once")
    worker.add_argument("--quiet", action="store_true", help="log warnings and errors only")
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    from ..supervisor._worker import load_app, run_worker

    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        app = load_app(args.app)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"tether: cannot load {args.app}: {exc}", file=sys.stderr)
        return 1
    if args.sweep_interval is not None:
        app.options["sweep_interval"] = args.sweep_interval
    if args.max_active_runs is not None:
        app.options["max_active_runs"] = args.max_active_runs
    anyio.run(run_worker, args.root, app)
    return 0
