"""The pages and the command line agree.

The command line reference is generated from the parser when the site is built
(``docs/_hooks.py``), so it lists every command and option by construction; these tests check
that, and that the synopses written by hand on the pages (``tether gc --root DIR [--keep-days
7] ...``) name exactly the options each command takes, and that the crash points the reference
names are the runtime's.
"""

from __future__ import annotations

import argparse
import importlib.util
import re

import pytest

from tests.docs._pages import DOCS, REPO, all_pages, read_page
from tether._failpoints import POINTS
from tether.cli import build_parser

_spec = importlib.util.spec_from_file_location("_hooks", DOCS / "_hooks.py")
assert _spec is not None
assert _spec.loader is not None
_hooks = importlib.util.module_from_spec(_spec)  # docs/_hooks.py, what the site is built with
_spec.loader.exec_module(_hooks)

STORE_OPTIONS = {"--root", "--store", "--schema"}  # described once, for every command


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


def _synopses() -> dict[str, set[str]]:
    """The options each command's synopsis lines name, across the hand-written pages' text
    and sh blocks (a line starting ``tether COMMAND``, and the indented lines after it)."""
    found: dict[str, set[str]] = {}
    commands = sorted(_commands(), key=len, reverse=True)
    for path in all_pages():
        for block in read_page(path).blocks:
            if block.lang not in {"text", "sh"}:
                continue
            current = None
            for line in block.body.splitlines():
                text = line.split("#", 1)[0]
                if text.startswith("tether "):
                    rest = text.removeprefix("tether ").strip()
                    current = next((c for c in commands if rest.startswith(c)), None)
                elif not text.startswith(" "):
                    current = None
                if current is not None and block.lang == "text":
                    found.setdefault(current, set()).update(re.findall(r"--[a-z][a-z-]*", text))
    return found


def test_every_command_has_a_synopsis_on_a_page() -> None:
    assert set(_synopses()) == set(_commands())


@pytest.mark.parametrize("command", sorted(_commands()))
def test_a_synopsis_names_exactly_the_options_of_its_command(command: str) -> None:
    have = _commands()[command]
    documented = _synopses().get(command, set())
    if STORE_OPTIONS & have == STORE_OPTIONS:
        documented |= STORE_OPTIONS
    assert documented == have


def test_the_generated_reference_has_every_command_and_option() -> None:
    page = _hooks.cli_page()
    for command, options in _commands().items():
        section = page.split(f"## `tether {command}`", 1)[1].split("\n## ", 1)[0]
        for option in options:
            assert f"`{option}" in section or f", {option}" in section, (command, option)


def test_the_documented_crash_points_are_the_runtimes() -> None:
    text = (DOCS / "reference" / "crash-points.md").read_text()
    named = re.findall(r"`([a-z_]+)`", text.split("Setting `TETHER_CRASH_AT")[0])
    assert set(named) == set(POINTS)
    crashtest = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    points_help = crashtest[0].choices["crashtest"].format_help()
    for point in POINTS:
        assert point in points_help.replace("\n", " ").replace("  ", " "), point


def test_every_public_module_has_a_reference_page_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    for module in _hooks.public_modules():
        assert f"reference/api/{module}.md" in nav, module
