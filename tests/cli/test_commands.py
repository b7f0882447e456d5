"""The command line loads the module of the command it is given, and only that: ``tether runs``
never imports the worker, the console, the deploy check or the tools; ``tether --help`` and a
mistyped command still see every command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tether.cli import COMMANDS, build_parser

from ._stores import Env

NAMES = [name for _, names in COMMANDS for name in names]

NOT_FOR_READING = (
    "tether.cli._bench",
    "tether.cli._crashtest",
    "tether.cli._demo",
    "tether.cli._deploy",
    "tether.cli._gc",
    "tether.cli._ops",
    "tether.cli._serve",
    "tether.cli._worker",
    "tether.models._anthropic",
    "tether.models._openai",
    "tether.models._scripted",
    "tether.models._transcript",
    "tether.operate._deploy",
    "tether.supervisor._supervisor",
    "tether.tools",
    "tether.web",
)
"""What listing a store's runs does without (each loaded when its own command runs)."""


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_the_table_names_every_command_in_the_order_help_lists_them() -> None:
    assert list(_choices(build_parser())) == NAMES
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("command", NAMES)
def test_a_command_parses_as_the_full_parser_parses_it(command: str) -> None:
    alone = _choices(build_parser(command))
    assert command in alone
    assert alone[command].format_help() == _choices(build_parser())[command].format_help()


def _imports(*argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``tether ARGV`` in a process of its own, and the modules it had imported at the end."""
    script = (
        "import json, sys\n"
        "from tether.cli import main\n"
        "try:\n"
        f"    code = main({list(argv)!r})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    return done, json.loads(done.stderr.splitlines()[-1])


def test_tether_runs_imports_only_what_listing_runs_needs(env: Env) -> None:
    done, modules = _imports("runs", "--root", env.r)
    assert done.returncode == 0, done.stderr
    assert "run-approve" in done.stdout
    assert "tether.cli._runs" in modules
    assert [m for m in modules if m.startswith(NOT_FOR_READING)] == []


def test_help_and_a_mistyped_command_see_every_command() -> None:
    done, modules = _imports("--help")
    assert done.returncode == 0
    listed = done.stdout.split("positional arguments:", 1)[1]
    assert all(f"    {name} " in listed or f"    {name}\n" in listed for name in NAMES)
    assert "tether.cli._deploy" in modules
    done, _ = _imports("runz")
    assert done.returncode == 2
    assert "invalid choice: 'runz'" in done.stderr
    assert all(repr(name) in done.stderr for name in NAMES)
