"""``tether crashtest`` on scenarios that are themselves broken: exit 2 with what is wrong (not
1, which says the agent is unsafe), and its progress lines."""

from __future__ import annotations

import pathlib
import subprocess
import sys

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
