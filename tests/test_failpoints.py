"""Failpoints are the runtime's own; the killer that arms them is the test kit's, validated."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tether import _failpoints
from tether._failpoints import CrashPointError, parse

REPO = pathlib.Path(__file__).resolve().parents[1]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_import_tether_does_not_import_the_test_kit() -> None:
    proc = _python("import tether; tether.Supervisor")  # the runtime, with its failpoints
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "tether.supervisor._loop" in imported
    assert not [m for m in imported if m.startswith("tether.testing")]


def test_a_malformed_setting_does_not_break_import_tether() -> None:
    proc = _python("import tether; print('ok')", TETHER_CRASH_AT="tool_returned:x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tool_retruned", "unknown crash point 'tool_retruned'; known: model_answered"),
        ("tool_returned:0", "N must be a whole number of 1 or more, got '0'"),
        ("tool_returned:x", "N must be a whole number of 1 or more, got 'x'"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(spec: str, message: str) -> None:
    with pytest.raises(CrashPointError, match=message):
        parse(spec)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", "runs", "--root", str(REPO / "nowhere")],
        cwd=REPO,
        env={**clean, "TETHER_CRASH_AT": spec},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr


def test_disarmed_failpoints_call_nothing_and_a_hook_sees_each() -> None:
    seen: list[str] = []
    previous = _failpoints.set_hook(seen.append)
    try:
        _failpoints.failpoint("model_saved")
        _failpoints.failpoint("parked")
    finally:
        _failpoints.set_hook(previous)
    assert seen == ["model_saved", "parked"]
    assert parse("parked") == ("parked", 1)
    assert parse("tool_returned:3") == ("tool_returned", 3)


def test_a_supervisor_refuses_a_bad_setting_as_it_is_entered() -> None:
    """A program of its own with a mistyped ``TETHER_CRASH_AT`` stops as its supervisor is
    entered, naming the setting: read at the first point passed, inside a run, it was taken
    for that run's crash (restarted, charged, and the program went on uncrashed)."""
    code = """
import anyio, tempfile, tether
async def main():
    with tempfile.TemporaryDirectory() as root:
        model = tether.ScriptedModel(["done"])
        async with tether.Supervisor(tether.FileStore(root), model=model,
                                     tools=tether.ToolRegistry()) as sup:
            await sup.start("r", "go")
            print(await sup.wait("r"))
anyio.run(main)
"""
    proc = _python(code, TETHER_CRASH_AT="tool_retunred:1")
    assert proc.returncode == 1, proc.stdout
    assert "CrashPointError: TETHER_CRASH_AT='tool_retunred:1': unknown crash point" in proc.stderr
    assert "done" not in proc.stdout
    fine = _python(code, TETHER_CRASH_AT="tool_returned:1")  # a point the run never passes
    assert fine.returncode == 0, fine.stderr
    assert fine.stdout.strip() == "done"
