"""``tether worker --root DIR|--store URL --app MODULE:FACTORY``: serve a store's runs.

Until SIGTERM or SIGINT; see ``tether.supervisor.run_worker``. The command answers those
signals from its first line to its return (``exit_on_stop_signals``): whenever one comes, the
worker exits 0, leaving no lock and no lease behind. (It puts the handlers back as it
returns: ``tether.cli.main`` may be called in a process of the caller's.)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import anyio

from ._input import count, seconds, some_seconds
from ._view import (
    StoreMissingError,
    add_store_options,
    check_store_usage,
    open_store,
    store_failure,
    store_spec,
    uses_postgres,
)

log = logging.getLogger("tether.worker")

DEFAULT_STORE_WAIT = 60.0
"""Seconds a worker waits at start-up for a PostgreSQL database that cannot be reached yet."""


def add_worker_commands(commands: Any) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a supervisor over a store until SIGTERM/SIGINT",
        description="Resume every unfinished run in the store, take over runs whose owner "
        "process died, continue parked runs when a decision arrives, until SIGTERM or SIGINT. "
        "On the first signal it drains: no new model or tool call starts, the calls already "
        "running finish and are recorded (up to the app's drain_timeout, 30 s by default), and "
        "the runs still active are recorded as suspended, which their next owner does not "
        "count against them; a second signal stops the drain at once. "
        "MODULE:FACTORY names a function returning a tether.supervisor.WorkerApp (model, tools, "
        "supervisor options); the current directory is importable. The store is a directory "
        "(--root DIR; workers on one machine share it) or a PostgreSQL database (--store URL; "
        "workers on many machines share it, each run held by one worker at a time through a "
        "lease that another worker takes over once it expires, see --lease-ttl). Exit 0 on a "
        "signal; 1 if the application cannot be loaded (its import or factory raised); 2 on bad "
        "usage (--app not MODULE:FACTORY); 3 if the store cannot be reached, or a tool source "
        "(an MCP server) after 60 s of trying again. A PostgreSQL "
        "database that cannot be reached yet when the worker starts (down, starting up or in "
        "recovery, out of connection slots, a host name not resolving yet) is waited for, "
        "with a log line at each try, for up to --store-wait seconds; a mistake (a wrong "
        "password, no such database or role, a newer schema) exits 3 at once.",
    )
    add_store_options(worker)
    worker.add_argument(
        "--store-wait",
        metavar="SECONDS",
        type=some_seconds,
        default=None,
        help="with a PostgreSQL --store: seconds to wait at start-up for a database that "
        "cannot be reached yet, then exit 3 with the reason; 0 tries once (default: 60)",
    )
    worker.add_argument(
        "--lease-ttl",
        metavar="SECONDS",
        type=seconds,
        default=None,
        help="with a PostgreSQL --store: seconds a run's lease lasts without renewal (renewed "
        "every third of it); a worker that stops loses its runs to the others this long after "
        "(default: 30)",
    )
    worker.add_argument(
        "--app", required=True, metavar="MODULE:FACTORY", type=app_target, help="the application"
    )
    worker.add_argument(
        "--sweep-interval",
        metavar="SECONDS",
        type=seconds,
        default=None,
        help="seconds between looks for runs to take over (default: the app's, else 5)",
    )
    worker.add_argument(
        "--max-active-runs", type=count, default=None, metavar="N", help="runs advanced at once"
    )
    worker.add_argument("--quiet", action="store_true", help="log warnings and errors only")
    worker.set_defaults(handler=_worker)


def app_target(text: str) -> str:
    """``--app``'s argument type: ``MODULE:FACTORY`` (else bad usage, exit 2)."""
    module, sep, name = text.partition(":")
    if not (sep and module and name):
        raise argparse.ArgumentTypeError(f"expected MODULE:FACTORY, got {text!r}")
    return text


def _worker(args: argparse.Namespace) -> int:
    from ..supervisor._worker import exit_on_stop_signals

    with exit_on_stop_signals():  # first: a signal from here on is a clean exit 0
        return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    from .._errors import StoreUnavailableError
    from ..supervisor import load_app, run_worker
    from ..supervisor._worker import SourcesUnavailableError, tune_collector

    check_store_usage(args, {"--lease-ttl": args.lease_ttl, "--store-wait": args.store_wait})
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("asyncpg.pool").addFilter(_one_line)
    log.info("worker %d starting (%s)", os.getpid(), args.app)
    try:
        app = load_app(args.app)
    except Exception as exc:  # the application's own code: say what it raised, no traceback
        print(f"tether: cannot load {args.app}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.sweep_interval is not None:
        app.options["sweep_interval"] = args.sweep_interval
    if args.max_active_runs is not None:
        app.options["max_active_runs"] = args.max_active_runs
    options: dict[str, float] = {}
    if uses_postgres(args):
        options["start_wait"] = DEFAULT_STORE_WAIT if args.store_wait is None else args.store_wait
        if args.lease_ttl is not None:
            options["lease_ttl"] = args.lease_ttl
    tune_collector()  # this process is the worker's own
    _say_if_new(args)
    try:
        store = open_store(args, create=True, **options)
        anyio.run(run_worker, store, app)
    except StoreUnavailableError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 3
    except SourcesUnavailableError as exc:
        print(f"tether: {args.app}: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:
        problem = str(exc) if isinstance(exc, StoreMissingError) else store_failure(args, exc)
        if problem is None:
            raise
        print(f"tether: {problem}", file=sys.stderr)
        return 3
    return 0


def _say_if_new(args: argparse.Namespace) -> None:
    """Warn when the directory the worker is to serve does not exist yet: the worker creates
    an empty store there, which is right for a first deploy and wrong for a mistyped
    ``--root`` (every other command refuses one), so say which it did, and where."""
    spec = store_spec(args)
    if not uses_postgres(args) and not os.path.lexists(spec):
        log.warning(
            "%s did not exist: a new, empty store is made there (if you meant an existing "
            "store, stop this worker and check %s)",
            os.path.abspath(spec),
            "--root" if args.store is None else "--store",
        )


def _one_line(record: logging.LogRecord) -> bool:
    """asyncpg's pool logs a whole traceback at each try to reconnect while the database is
    out of reach (every second or so): in a worker's log, one line each, with the error's
    words (tether says itself what the outage does to the runs)."""
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        record.msg, record.args = f"{record.getMessage()} ({type(error).__name__}: {error})", ()
        record.exc_info, record.exc_text = None, None
    return True
