"""The ``tether`` command line: a thin layer over the public API.

Exit codes: 0 success, 1 the operation found a problem (corruption, a refused change),
2 bad usage (argparse's own), 3 a file could not be read or the store (a directory, or a
PostgreSQL database given with ``--store URL``) could not be reached, or the directory
``tether bench`` is to measure cannot be written. Output cut short by its
reader (``tether show ... | head -1``) is not an error: the command stops quietly with 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import _failpoints
from .._version import __version__
from ._bench import add_bench_command as _add_bench_command
from ._crashtest import add_crashtest_command as _add_crashtest_command
from ._demo import add_demo_commands as _add_demo_commands
from ._deploy import add_deploy_commands as _add_deploy_commands
from ._journal import add_journal_commands as _add_journal_commands
from ._runs import add_run_commands as _add_run_commands
from ._serve import add_serve_command as _add_serve_command
from ._worker import add_worker_commands as _add_worker_commands

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_IO = 3


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation)."""
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Durable runs for long-running LLM agents: journals, replay, supervision.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_journal_commands(commands)
    _add_demo_commands(commands)
    _add_crashtest_command(commands)
    _add_run_commands(commands)
    _add_worker_commands(commands)
    _add_deploy_commands(commands)
    _add_serve_command(commands)
    _add_bench_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if any(os.environ.get(var) for var in _failpoints.ENVIRONMENT):
        try:
            _failpoints.arm()  # now: a bad setting stops the command before it does anything
        except _failpoints.CrashPointError as exc:
            print(f"tether: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        code: int = args.handler(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped reading (`| head`): what it wanted it got. Point stdout at
        # /dev/null so the interpreter's last flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_OK
    return code


def _entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())


__all__ = ["EXIT_IO", "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "build_parser", "main"]
