"""A run's whole life in production: deploys (SIGTERM) and kills (SIGKILL), over and over.

Real ``tether worker`` processes on one store. A graceful stop drains: the step in flight
finishes and is recorded, the run is recorded as suspended, and nothing is counted against it.
A kill is counted only until the run makes progress again. So a run that makes progress
between interruptions finishes however many it meets, with every side effect once.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from tether.journal import FileStore, Resumed, RunStarted, Suspended, ToolResult, ToolStarted
from tether.supervisor import RunStatus, fold, run_status
from tether.supervisor._loop import Runtime, build_manifest

from . import _life_app
from ._helpers import of_type

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-m", "tether.cli")
RUN = "run-life"


async def _create(root: pathlib.Path, run_id: str, prompt: str) -> None:
    async with FileStore(root) as store:
        rt = Runtime(model=_life_app.make_model(), tools=_life_app.tools, load_blob=store.load_blob)
        started = RunStarted(
            run_id=run_id,
            manifest=build_manifest(rt, system=None, app_version=""),
            messages=[{"role": "user", "content": prompt}],
        )
        journal = await store.create(run_id, [started])
        await journal.aclose()


def _worker(root: pathlib.Path, ledger: pathlib.Path, log: pathlib.Path, **env: str) -> Any:
    with log.open("ab") as stderr:
        return subprocess.Popen(
            [*CLI, "worker", "--root", str(root), "--app", "tests.supervisor._life_app:app"],
            cwd=REPO,
            env={**os.environ, "TETHER_TEST_LEDGER": str(ledger), **env},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _lines(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _events(root: pathlib.Path, run_id: str) -> list[Any]:
    async def read() -> list[Any]:
        async with FileStore(root) as store:
            return await store.read(run_id)

    return anyio.run(read)


@pytest.mark.slow
def test_a_run_lives_through_eight_deploys_and_eight_kills_mid_step(tmp_path: pathlib.Path) -> None:
    root, ledger, log = tmp_path / "store", tmp_path / "ledger", tmp_path / "workers.log"
    starts = pathlib.Path(str(ledger) + ".starts")
    anyio.run(_create, root, RUN, "work")
    for n in range(16):
        done_before = len(_lines(ledger))
        proc = _worker(root, ledger, log)
        try:
            # Progress since this worker started, then a new step in flight: a stop mid-step.
            _wait("progress", lambda: len(_lines(ledger)) > done_before)  # noqa: B023
            mine = f"{proc.pid} "
            seen = sum(line.startswith(mine) for line in _lines(starts))
            _wait(
                "a step in flight",
                lambda: sum(line.startswith(mine) for line in _lines(starts)) > seen,  # noqa: B023
            )
            graceful = n % 2 == 0
            proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if graceful:
            assert code == 0, log.read_text()
            events = _events(root, RUN)
            # The step in flight finished and was recorded before the worker left.
            assert isinstance(events[-1], Suspended), events[-3:]
            state = fold(events)
            assert not any(c.dangling for c in state.calls.values())
        else:
            assert code == -signal.SIGKILL
    final = _worker(root, ledger, log)
    try:
        _wait(
            "the run to finish",
            lambda: fold(_events(root, RUN)).finished is not None,
            timeout=60,
        )
    finally:
        final.send_signal(signal.SIGTERM)
        assert final.wait(30) == 0

    events = _events(root, RUN)
    state = fold(events)
    assert run_status(state, time.time()).status is RunStatus.DONE
    assert state.final_text == f"all {_life_app.STEPS} steps done"
    keys = [json.loads(line)["key"] for line in _lines(ledger)]
    assert sorted(keys) == sorted(f"{RUN}:toolu_{n}" for n in range(_life_app.STEPS))  # once each
    resumes = of_type(events, Resumed)
    assert [r.cause for r in resumes].count("shutdown") == 8
    assert not any(r.charged for r in resumes if r.cause == "shutdown")
    assert len(of_type(events, Suspended)) == 8
    assert state.interruptions == 0

    show = subprocess.run(
        [*CLI, "show", "--root", str(root), RUN],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=60,
    )
    assert "after shutdown (not a restart)" in show.stdout
    assert "after crash" in show.stdout
    assert "suspended by" in show.stdout


def test_sigterm_lets_an_escalate_call_finish_and_records_it(tmp_path: pathlib.Path) -> None:
    root, ledger, log = tmp_path / "store", tmp_path / "ledger", tmp_path / "workers.log"
    starts = pathlib.Path(str(ledger) + ".starts")
    anyio.run(_create, root, "run-notify", "notify")
    proc = _worker(root, ledger, log, TETHER_TEST_NOTIFY_S="2")
    try:
        _wait("the call to start", lambda: any(x.endswith(" notify") for x in _lines(starts)))
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
        # It waited for the call (2 s) rather than cutting it off.
        assert time.monotonic() - stopped_at > 1.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = _events(root, "run-notify")
    (result,) = of_type(events, ToolResult)
    assert (result.ok, result.content) == (True, "notified dana")
    assert isinstance(events[-1], Suspended)

    again = _worker(root, ledger, log)
    try:
        _wait("the run to finish", lambda: fold(_events(root, "run-notify")).finished is not None)
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(30) == 0
    events = _events(root, "run-notify")
    assert fold(events).final_text == "customer notified"
    assert len(of_type(events, ToolStarted)) == 1  # no escalation, no second attempt
    assert _lines(pathlib.Path(str(ledger) + ".attempts")) == ["run-notify:toolu_n"]


def test_a_second_signal_stops_the_drain_at_once(tmp_path: pathlib.Path) -> None:
    root, ledger, log = tmp_path / "store", tmp_path / "ledger", tmp_path / "workers.log"
    starts = pathlib.Path(str(ledger) + ".starts")
    anyio.run(_create, root, "run-notify", "notify")
    proc = _worker(root, ledger, log, TETHER_TEST_NOTIFY_S="60")
    try:
        _wait("the call to start", lambda: any(x.endswith(" notify") for x in _lines(starts)))
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # draining: waiting for the call
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopping at once" in log.read_text()
    events = _events(root, "run-notify")
    # Cut off: the call has no result (the next owner escalates it), the stop is recorded.
    assert of_type(events, ToolResult) == []
    assert isinstance(events[-1], Suspended)
