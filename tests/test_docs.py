"""The README and the command line agree: every option a command takes is in its synopsis,
every option a synopsis names exists, and the crash points documented are the runtime's."""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tether._failpoints import POINTS
from tether.cli import build_parser

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
STORE_OPTIONS = {"--root", "--store", "--schema"}  # "Below, `--root DIR` stands for either"


def _commands() -> dict[str, set[str]]:
    """Every leaf command of the parser (``"journal repair"``, ``"gc"``) and its options."""
    out: dict[str, set[str]] = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, child in subs[0].choices.items():
                walk(f"{prefix} {name}".strip(), child)
            return
        out[prefix] = {
            o for a in parser._actions for o in a.option_strings if o.startswith("--")
        } - {"--help"}

    walk("", build_parser())
    return out


def _code_blocks() -> list[list[str]]:
    blocks: list[list[str]] = []
    inside: list[str] | None = None
    for line in README.splitlines():
        if line.startswith("```"):
            if inside is None:
                inside = []
            else:
                blocks.append(inside)
                inside = None
        elif inside is not None:
            inside.append(line)
    return blocks


def _synopses() -> dict[str, set[str]]:
    """The options each command's synopsis lines in the README's code blocks name."""
    found: dict[str, set[str]] = {}
    commands = sorted(_commands(), key=len, reverse=True)
    current = None
    for block in _code_blocks():
        for line in block:
            text = line.split("#", 1)[0]
            if text.startswith("tether "):
                rest = text.removeprefix("tether ").strip()
                current = next((c for c in commands if rest.startswith(c)), None)
            elif not text.startswith(" "):
                current = None
            if current is not None:
                found.setdefault(current, set()).update(re.findall(r"--[a-z][a-z-]*", text))
    return found


def test_every_command_has_a_synopsis() -> None:
    assert set(_synopses()) == set(_commands())


@pytest.mark.parametrize("command", sorted(_commands()))
def test_a_synopsis_names_exactly_the_options_of_its_command(command: str) -> None:
    have = _commands()[command]
    documented = _synopses().get(command, set())
    if STORE_OPTIONS & have == STORE_OPTIONS:
        documented |= STORE_OPTIONS  # the store options are described once, for all
    assert documented == have


def test_the_documented_crash_points_are_the_runtimes() -> None:
    section = README.split("## Crash points", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z_]+)`", section.split("Setting `TETHER_CRASH_AT")[0])
    assert set(named) == set(POINTS)
    help_text = build_parser().format_help()
    crashtest = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    points_help = crashtest[0].choices["crashtest"].format_help()
    for point in POINTS:
        assert point in points_help.replace("\n", " ").replace("  ", " "), point
    assert help_text


def test_the_first_example_runs_as_written_offline(tmp_path: pathlib.Path) -> None:
    """The README's first example, copied as it stands, with no API key: the scripted model
    answers, the run parks for priya's approval, and the reply goes out once."""
    block = next(b for b in _code_blocks() if "anyio.run(main)" in b and "import os" in b)
    script = tmp_path / "example.py"
    script.write_text("\n".join(block) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "reply to KITE-142: 'Sign in again: SSO is fixed.' (key run-kite-142:toolu_02)",
        "done Replied to KITE-142.",
    ]
