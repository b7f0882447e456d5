"""Under a real, low descriptor limit, a burst of starts waits for descriptors instead of
failing, and a worker takes hundreds of runs in without ever running out.

Each case runs in a child process whose ``RLIMIT_NOFILE`` is set low for real; the journal's
budget (``tether.journal._descriptors``) is what keeps it under the limit.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import time

import anyio
import pytest

import tether
from tether.journal import FileStore
from tether.supervisor import Supervisor, fold

from ._helpers import WAIT

REPO = pathlib.Path(__file__).resolve().parents[2]
BURST = 2_000
WORKER_RUNS = 300


def burst(root: pathlib.Path, limit: int, env: dict[str, str] | None = None) -> dict[str, object]:
    """What ``_burst_child`` reports for a burst of ``BURST`` starts under ``limit``."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.supervisor._burst_child", str(root), str(BURST), str(limit)],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Too many open files" not in proc.stderr, proc.stderr[-3000:]
    report: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return report


@pytest.mark.slow
def test_a_burst_of_starts_waits_for_descriptors(tmp_path: pathlib.Path) -> None:
    """2,000 ``sup.start`` calls at once under 256 descriptors: every run starts and finishes
    (each writes a blob and reads it back); 2,000 parked runs hold no descriptor."""
    report = burst(tmp_path, 256)
    assert report["failed"] == 0, report["errors"]
    assert report["statuses"] == {"done": BURST}
    assert report["parked"] == {"waiting_for_approval": BURST}
    assert report["parked_fds"] <= 2  # type: ignore[operator]


def _limited(limit: int) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


async def _create_runs(root: pathlib.Path) -> list[str]:
    """Runs that exist durably and that no process has started (a worker takes them in)."""
    from ._burst_child import app

    model, tools = app()
    ids = [f"run-{i:03d}" for i in range(WORKER_RUNS)]
    async with Supervisor(FileStore(root), model=model, tools=tools, resume=False) as sup:
        for run_id in ids:
            await sup.start(run_id, f"fetch {run_id}", drive=False)
    return ids


async def _finished(root: pathlib.Path, ids: list[str]) -> int:
    async with FileStore(root) as store:
        return sum([fold(await store.read(run_id)).finished is not None for run_id in ids])


@pytest.mark.slow
async def test_a_worker_under_64_descriptors_takes_runs_in_without_running_out(
    tmp_path: pathlib.Path,
) -> None:
    """``tether worker`` under ``ulimit -n 64`` finds 300 runs waiting (each writes a blob and
    reads it back): it finishes them all and never logs running out of descriptors."""
    root = tmp_path / "store"
    ids = await _create_runs(root)
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli", "worker", "--root", str(root)),
                *("--app", "tests.supervisor._fd_app:app", "--sweep-interval", "0.5"),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: _limited(64),
        )
    try:
        deadline = time.monotonic() + 20 * WAIT
        while (done := await _finished(root, ids)) < len(ids) and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()[-3000:]
            await anyio.sleep(0.2)
        assert done == len(ids), log.read_text()[-3000:]
    finally:
        worker.send_signal(signal.SIGTERM)
        rc = worker.wait(timeout=60)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert "Too many open files" not in text
    assert "out of file descriptors" not in text
    assert "WARNING" not in text, text[-3000:]
    assert "ERROR" not in text, text[-3000:]
    async with FileStore(root) as store:
        states = [fold(await store.read(run_id)) for run_id in ids]
    assert {s.finished.status if s.finished else "unfinished" for s in states} == {"done"}


def test_more_active_runs_than_the_budget_holds_are_advanced_as_many_as_fit(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tether.FileStore(tmp_path, descriptors=40)
    assert store.descriptors.journals == 31  # 40, less 3 short uses of 3 descriptors
    sup = Supervisor(store, model=tether.ScriptedModel(["hi"]), max_active_runs=100)
    assert sup._tasks._active.total_tokens == 30
    assert "advancing at most 30 at once" in caplog.text
    default = Supervisor(store, model=tether.ScriptedModel(["hi"]))
    assert default._tasks._active.total_tokens == 15


def test_descriptors_taken_by_other_code_are_waited_for(tmp_path: pathlib.Path) -> None:
    """A tool takes every descriptor left under ``ulimit -n 64`` for half a second: its result's
    blob, and ten runs started meanwhile, wait for descriptors (logged once) and finish; no
    run fails or is restarted for it."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.supervisor._hog_child", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["took"] > 0
    assert report["statuses"] == {"done": 11}
    assert report["restarts"] == 0
    shortages = [line for line in report["log"] if "out of file descriptors" in line]
    assert len(shortages) == 1, report["log"]
    assert shortages[0].startswith("WARNING")
    assert any("available again" in line for line in report["log"])
    assert not any(line.startswith(("ERROR", "WARNING run")) for line in report["log"])
