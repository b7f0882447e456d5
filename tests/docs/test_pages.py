"""Every code block of the tutorial and the how-to guides (integrations too) runs as written,
or says why not.

See ``_pages.py`` for how a page is read and run. Each page runs in a fresh directory with no
API key in its environment (so the examples' scripted models answer), with the ``python`` and
``tether`` of the environment running the tests first on ``PATH``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs._pages import (
    CODE,
    NOT_CODE,
    REPO,
    Block,
    Page,
    console_commands,
    output_matches,
    read_page,
    run_pages,
)

pytestmark = pytest.mark.slow

KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "TETHER_CONSOLE_TOKEN")
COMMAND_TIMEOUT = 240.0
STARTUP_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS and not k.startswith("TETHER_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    return env


def _available(requires: str) -> bool:
    """Whether every module or program named (comma-separated) is there. Where CI requires
    PostgreSQL (``TETHER_REQUIRE_POSTGRES=1``), its server binaries must be."""
    missing = [
        name.strip()
        for name in requires.split(",")
        if importlib.util.find_spec(name.strip()) is None and shutil.which(name.strip()) is None
    ]
    if os.environ.get("TETHER_REQUIRE_POSTGRES") == "1":
        assert not {"initdb", "pg_ctl"} & set(missing), f"missing {missing}"
    return not missing


def _split_assignments(command: str) -> tuple[str, str]:
    """``("export A=1; ", "cmd ...")`` for ``"A=1 cmd ..."``: a background command is
    ``exec``'d, so that its own exit code is the one seen."""
    settings = ""
    while m := re.match(r"([A-Za-z_][A-Za-z0-9_]*=\S*)\s+", command):
        settings += f"export {m[1]}; "
        command = command[m.end() :]
    return settings, command


class PageRun:
    """One page run top to bottom in ``cwd``."""

    def __init__(self, page: Page, cwd: Path) -> None:
        self.page = page
        self.cwd = cwd
        self.env = _environment()
        self.ports = {str(p): str(_free_port()) for p in page.ports}
        self.background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []

    def text(self, body: str) -> str:
        for documented, free in self.ports.items():
            body = body.replace(documented, free)
        return body

    def shell(self, command: str, block: Block) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.text(command)],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        out = done.stdout.decode(errors="replace")
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}:\n{command}\n{out}"
        return out

    def start(self, block: Block) -> None:
        log = self.cwd / f".background-{block.line}.log"
        settings, command = _split_assignments(self.text(block.body).strip())
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", f"{settings}exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append((block, proc, log))
        wanted = self.text(block.background or "")
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while wanted not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise AssertionError(
                    f"{block.where}: exited {proc.returncode} before saying {wanted!r}:\n"
                    + log.read_text(errors="replace")
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{block.where}: never said {wanted!r}")
            time.sleep(0.05)

    def stop(self) -> list[str]:
        """SIGTERM every background command; each must exit 0. Returns the problems."""
        problems = []
        for block, proc, log in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                problems.append(f"{block.where}: did not stop on SIGTERM")
                continue
            # tether's commands exit 0 after a drain; others (uvicorn) may end by the signal
            command = _split_assignments(block.body.strip())[1]
            allowed = {0} if command.startswith("tether ") else {0, -signal.SIGTERM}
            if code not in allowed:
                output = log.read_text(errors="replace")
                problems.append(f"{block.where}: exited {code} on SIGTERM:\n{output}")
        return problems

    def run(self, block: Block) -> None:
        if block.skip is not None or block.fragments:
            return
        if block.requires is not None and not _available(block.requires):
            return  # an optional package or program, not installed here
        if block.title is not None:
            target = self.cwd / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.text(block.body))
        elif block.lang == "sh" and block.background is not None:
            self.start(block)
        elif block.lang == "sh":
            self.shell(block.body, block)
        elif block.lang == "console":
            for command, expected in console_commands(block.body):
                out = self.shell(command, block)
                shown = [self.text(line) for line in expected]
                assert output_matches(shown, out), (
                    f"{block.where}: `{command}` printed\n{out}\nwhere the page shows\n"
                    + "\n".join(expected)
                )
        elif block.lang == "python":
            script = self.cwd / f".block-{block.line}.py"
            script.write_text(self.text(block.body))
            self.shell(f"python {script.name}", block)


@pytest.mark.parametrize("path", run_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_page_runs_as_written(path: Path, tmp_path: Path) -> None:
    run = PageRun(read_page(path), tmp_path)
    try:
        for block in run.page.blocks:
            run.run(block)
    finally:
        problems = run.stop()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", run_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_block_is_run_or_says_why_not(path: Path) -> None:
    """A code block must be one the run knows how to run; one it skips must give a reason."""
    page = read_page(path)
    whole = {f for b in page.blocks if b.title is not None for f in b.includes}
    for block in page.blocks:
        if block.skip is not None:
            assert block.skip.strip(), f"{block.where}: a skipped block must say why"
            continue
        if block.fragments:
            # part of a file the page saves and runs, or of a crash-test scenario in examples/,
            # which tests/testing/test_crashtest.py runs whole
            shown = {f for f in block.includes if not f.startswith("examples/")}
            assert shown <= whole, f"{block.where}: shows part of a file the page does not save"
            continue
        assert block.lang in CODE | NOT_CODE, f"{block.where}: a block of {block.lang!r}"
        if block.background is not None:
            assert block.lang == "sh", f"{block.where}: only a sh block runs in the background"
            assert block.background, f"{block.where}: say what a started command prints"


def test_the_tutorial_and_how_to_code_type_checks() -> None:
    """The Python files the pages include pass ``mypy --strict`` (as the package does)."""
    files: set[str] = set()
    for path in run_pages():
        for block in read_page(path).blocks:
            files.update(f for f in block.includes if f.endswith(".py"))
    dirs = sorted({str((REPO / name).parent) for name in files})
    done = subprocess.run(  # from the repository, sharing its cache with CI's own mypy run
        [sys.executable, "-m", "mypy", "--strict", *sorted(files)],
        cwd=REPO,
        env={**os.environ, "MYPYPATH": os.pathsep.join(dirs)},  # a guide uses the tutorial's
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
