"""Two worker processes on one store; one is killed with SIGKILL; the other finishes its runs."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import anyio
import pytest

import tether
from tether.journal import FileStore, Resumed, RunStarted, verify_file
from tether.supervisor import fold
from tether.supervisor._loop import Runtime, build_manifest

from . import _ledger_app

REPO = pathlib.Path(__file__).resolve().parents[2]
RUNS = 24
WORKER = (sys.executable, "-m", "tether.cli", "worker")


async def _create_runs(root: pathlib.Path) -> list[str]:
    """Runs that exist durably but that no process has started: any worker may take them."""
    ids = [f"run-{i:03d}" for i in range(RUNS)]
    async with FileStore(root) as store:
        rt = Runtime(
            model=_ledger_app.make_model(), tools=_ledger_app.tools, load_blob=store.load_blob
        )
        manifest = build_manifest(rt, system=None, app_version="")
        for run_id in ids:
            started = RunStarted(
                run_id=run_id,
                manifest=manifest,
                messages=[{"role": "user", "content": f"item-{run_id}"}],
            )
            journal = await store.create(run_id, [started])
            await journal.aclose()
    return ids


def _worker(root: pathlib.Path, ledger: pathlib.Path, log: pathlib.Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TETHER_TEST_LEDGER": str(ledger)}
    with log.open("ab") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*WORKER, "--root", str(root), "--quiet", "--app", "tests.supervisor._ledger_app:app"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


async def _statuses(root: pathlib.Path, ids: list[str]) -> dict[str, str]:
    async with FileStore(root) as store:
        out = {}
        for run_id in ids:
            state = fold(await store.read(run_id))
            out[run_id] = state.finished.status if state.finished else "unfinished"
        return out


def _lines(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
async def test_a_killed_workers_runs_are_finished_by_the_other(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    ledger = tmp_path / "ledger.jsonl"
    ids = await _create_runs(root)
    log = tmp_path / "workers.log"
    first, second = _worker(root, ledger, log), _worker(root, ledger, log)
    try:
        deadline = time.monotonic() + 30
        while len(_lines(ledger)) < 3 and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert len(_lines(ledger)) >= 3, "the workers made no progress"
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        done_by = time.monotonic() + 60
        while time.monotonic() < done_by:
            statuses = await _statuses(root, ids)
            if all(s == "done" for s in statuses.values()):
                break
            await anyio.sleep(0.2)
        assert statuses == dict.fromkeys(ids, "done")
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0, log.read_text()
        if first.poll() is None:
            first.kill()
            first.wait()

    # Exactly one delivery per run, whatever was attempted twice around the kill.
    delivered = [json.loads(line)["key"] for line in _lines(ledger)]
    assert sorted(delivered) == sorted(f"{run_id}:toolu_2" for run_id in ids)
    attempts = _lines(pathlib.Path(str(ledger) + ".attempts"))
    assert set(attempts) == set(delivered)
    for run_id in ids:
        verify_file(str(root / "runs" / f"{run_id}.journal"))
    # The survivor took over runs the killed worker had in hand (a restart, recorded).
    async with FileStore(root) as store:
        resumed = [e for run_id in ids for e in await store.read(run_id) if isinstance(e, Resumed)]
    assert any(e.pid == second.pid for e in resumed)


def test_worker_rejects_a_bad_app(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [*WORKER, "--root", str(tmp_path), "--app", "tests.supervisor._ledger_app:nothing_here"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot load" in proc.stderr


_ = tether


def test_worker_app_options_are_checked(tmp_path: pathlib.Path) -> None:
    def worker(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*WORKER, "--root", str(tmp_path), *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    no_colon = worker("--app", "tests.supervisor._ledger_app")
    assert no_colon.returncode == 2  # usage, as for crashtest's MODULE:SCENARIO
    assert "expected MODULE:FACTORY" in no_colon.stderr
    raising = worker("--app", "tests.supervisor._broken_app:app")
    assert raising.returncode == 1
    assert "cannot load tests.supervisor._broken_app:app: RuntimeError: no model key" in (
        raising.stderr
    )
    assert "Traceback" not in raising.stderr
    spinning = worker("--app", "tests.supervisor._ledger_app:app", "--sweep-interval", "0")
    assert spinning.returncode == 2
    assert "--sweep-interval: must be more than 0" in spinning.stderr
