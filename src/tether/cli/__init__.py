"""The ``tether`` command line: a thin layer over the public API.

Exit codes: 0 success, 1 the operation found a problem (corruption, a refused change),
2 bad usage (argparse's own), 3 a file could not be read or the store (a directory, or a
PostgreSQL database given with ``--store URL``) could not be reached, or the directory
``tether bench`` is to measure cannot be written. Output cut short by its
reader (``tether show ... | head -1``) is not an error: the command stops quietly with 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .. import _failpoints
from .._version import __version__

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_IO = 3

COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("_journal:add_journal_commands", ("journal",)),
    ("_demo:add_demo_commands", ("demo",)),
    ("_crashtest:add_crashtest_command", ("crashtest",)),
    ("_runs:add_run_commands", ("runs", "show")),
    ("_ops:add_op_commands", ("approve", "reject", "resolve", "retry", "signal", "cancel")),
    ("_gc:add_gc_command", ("gc",)),
    ("_worker:add_worker_commands", ("worker",)),
    ("_deploy:add_deploy_commands", ("check", "repin")),
    ("_serve:add_serve_command", ("serve",)),
    ("_bench:add_bench_command", ("bench",)),
)
"""Where each command is defined (``module:function`` adding its parsers), in the order
``tether --help`` lists them, with the commands each function adds. A command line names its
command first, so only that command's module is imported: ``tether runs`` does not import the
worker, the console or the deploy check."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation); with ``command`` (a
    name in ``COMMANDS``), one with only the commands defined beside it, which parses a
    command line that starts with it exactly as the full parser does."""
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Durable runs for long-running LLM agents: journals, replay, supervision.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for where, names in COMMANDS:
        if command is None or command in names:
            module, _, function = where.partition(":")
            getattr(importlib.import_module(f"{__name__}.{module}"), function)(commands)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names first, if it is one; otherwise (an option such as ``--help``
    first, an unknown command, nothing) ``None``: the full parser then answers."""
    first = argv[0] if argv else None
    return first if any(first in names for _, names in COMMANDS) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
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
