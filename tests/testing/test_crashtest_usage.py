"""``tether crashtest`` on scenarios that are themselves broken: exit 2 with what is wrong (not
1, which says the agent is unsafe), and its progress lines."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CRASHTEST = (sys.executable, "-m", "tether.cli", "crashtest")


def crashtest(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CRASHTEST, *argv], cwd=REPO, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("raises", "raised RuntimeError: cannot reach the fake service"),
        ("takes_nothing", "raised TypeError"),
        ("returns_none", "returned NoneType, not a tether.testing.Scenario"),
        ("ledger_is_a_list", "Scenario.ledger must be a function (called in each process)"),
        ("build_raises", "build() raised ImportError: no module named 'helpdesk'"),
        ("nowhere", "has no 'nowhere'"),
    ],
)
def test_a_broken_scenario_exits_2_with_what_is_wrong(factory: str, message: str) -> None:
    proc = crashtest(f"tests.testing._broken_scenarios:{factory}")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_reused_root_exits_2(tmp_path: pathlib.Path) -> None:
    (tmp_path / "left-over").write_text("x")
    proc = crashtest("tests.testing._broken_scenarios:fine", "--root", str(tmp_path))
    assert proc.returncode == 2
    assert f"--root {tmp_path} is not empty" in proc.stderr


@pytest.mark.slow
def test_progress_lines_off_a_terminal_and_every_documented_point_is_accepted() -> None:
    proc = crashtest(
        "tests.testing._broken_scenarios:fine", "--points", "model_answered,inbox_folded"
    )
    assert proc.returncode == 0, proc.stderr
    assert "  [1/1] " in proc.stdout  # one case: the one model_answered point it passes
    assert "result: crash-safe" in proc.stdout


def test_a_root_that_is_a_file_exits_2(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a-file").write_text("x")
    proc = crashtest("tests.testing._broken_scenarios:fine", "--root", str(tmp_path / "a-file"))
    assert proc.returncode == 2, proc.stderr
    assert f"--root {tmp_path / 'a-file'} is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_points_the_baseline_never_passes_test_nothing_and_exit_2() -> None:
    """A report of no case would say "crash-safe" having tested nothing."""
    proc = crashtest("tests.testing._broken_scenarios:fine", "--points", "gc_set_aside")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the baseline run never passed the crash points gc_set_aside" in proc.stderr
    assert "model_answered" in proc.stderr  # what it did pass
    assert "crash-safe" not in proc.stdout


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if text in cmdline and entry.name.isdigit():
            found.append(int(entry.name))
    return found


def test_sigterm_stops_the_cases_processes_and_removes_the_temporary_files(
    tmp_path: pathlib.Path,
) -> None:
    """A CI job's timeout sends SIGTERM to the harness alone: its case's child, inside a tool
    that never returns, is killed too, and the temporary directory goes."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen(
        [*CRASHTEST, "tests.testing._broken_scenarios:hangs"],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(temp.glob("tether-crashtest-*/baseline/**/started")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the baseline never reached its tool"
            time.sleep(0.05)
        (started,) = temp.glob("tether-crashtest-*/baseline/**/started")
        child = int(started.read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "tether: crashtest: stopped before it finished" in err
    assert "Traceback" not in err
    assert not pathlib.Path(f"/proc/{child}").exists()
    assert _processes_naming(str(temp)) == []
    assert list(temp.iterdir()) == []
