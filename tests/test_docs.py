"""The README: short, with the two commands CI runs, an example that runs as written, and
links that lead somewhere.

The site's pages have tests of their own (``tests/docs/``): their blocks run as written, their
synopses match the command line, the crash points and invariants they name are the code's.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.docs._pages import REPO, read_page
from tests.docs.test_pages import PageRun

README = REPO / "README.md"
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && tether demo"
TESTS = "python -m pytest -q -n 2"


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_holds_the_two_commands_and_ci_runs_its_test_command() -> None:
    first = next(b for b in read_page(README).blocks if b.lang == "sh")
    assert first.body.splitlines() == [INSTALL, TESTS]
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert TESTS in ci  # exactly the README's test command
    installs = [shlex.split(line) for line in ci if line.startswith("python -m pip install")]
    assert any(words[-2:] == ["-e", ".[test]"] for words in installs)


def test_the_readme_runs_as_written_offline(tmp_path: Path) -> None:
    """The example, saved as the README names it, killed at a crash point and resumed."""
    run = PageRun(read_page(README), tmp_path)
    try:
        for block in run.page.blocks:
            run.run(block)
    finally:
        assert not run.stop()
    assert len((tmp_path / "replies.jsonl").read_text().splitlines()) == 1


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" not in target:
            assert (REPO / target).is_file(), target
