"""A worker paused past its lease stops the calls it had running as soon as it runs again.

Found as: a worker frozen (SIGSTOP) while an escalate-policy call ran lost the run; the new
owner escalated the dangling call, a person answered ``retry``, and when the frozen worker was
let go its own call finished too: the effect happened twice. Now the paused worker's lease
timer fires first when it wakes (before the call's own wake-up), the call is cancelled and
nothing more is recorded for the run; and the escalation tells the person that the run was
taken over from a worker whose lease ran out, so they can make sure it is gone first.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Resumed
from tether.models import Message
from tether.postgres import PostgresStore
from tether.supervisor import Supervisor

from .._cli import REPO, run_tether
from . import _frozen_app

RUN = "run-notify"
CALL = "toolu_n"


def _worker(where: list[str], env: dict[str, str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", *where, "--lease-ttl", "1",
             "--app", "tests.postgres._frozen_app:app"],
            cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _lines(ledger: pathlib.Path) -> list[list[str]]:
    return [line.split() for line in ledger.read_text().splitlines()] if ledger.exists() else []


def _until(check: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _run(where: list[str]) -> dict[str, object]:
    (run,) = json.loads(run_tether("runs", *where, "--json").stdout)
    return dict(run)


async def _create(dsn: str, schema: str, run_id: str) -> None:
    app = _frozen_app.app()
    async with Supervisor(
        PostgresStore(dsn, schema=schema), model=app.model, tools=app.tools, resume=False
    ) as sup:
        await sup.start(run_id, "tell the customer", drive=False)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_a_worker_woken_after_losing_its_lease_does_not_finish_its_call(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str, attempt: int
) -> None:
    where = ["--store", pg_dsn, "--schema", pg_schema]
    ledger, log = tmp_path / "ledger", tmp_path / "workers.log"
    env = {"TETHER_TEST_LEDGER": str(ledger), "TETHER_TEST_CALL": "3"}
    anyio.run(_create, pg_dsn, pg_schema, RUN)
    frozen = _worker(where, env, log)
    other = None
    try:
        _until(lambda: [ln[0] for ln in _lines(ledger)] == ["start"], 60, "the call to start")
        frozen.send_signal(signal.SIGSTOP)
        other = _worker(where, env, log)  # takes the run over once the lease runs out
        _until(lambda: _run(where)["status"] == "needs_attention", 60, "the escalation")
        run = _run(where)
        waiting: dict[str, str]
        (waiting,) = run["waiting"]  # type: ignore[misc]
        assert waiting["awaiting"] == "resolution"
        assert "the run was taken over from worker" in waiting["reason"]
        assert "whose lease ended at" in waiting["reason"]
        assert "make sure it is gone before answering" in waiting["reason"]
        answered = run_tether("resolve", *where, RUN, CALL, "--outcome", "retry", "--by", "priya")
        assert answered.returncode == 0, answered.stderr
        _until(lambda: len(_lines(ledger)) >= 2, 60, "the retried call to start")
        frozen.send_signal(signal.SIGCONT)  # woken while the retried call runs
        _until(lambda: _run(where)["status"] == "done", 60, f"done: {log.read_text()[-2000:]}")
        time.sleep(3.5)  # long enough for the woken worker's call to have had its effect
    finally:
        _stop(frozen)
        if other is not None:
            _stop(other)
    effects = [ln for ln in _lines(ledger) if ln[0] == "effect"]
    assert len(effects) == 1, (_lines(ledger), log.read_text()[-3000:])
    assert effects[0][1] == str(other.pid)
    lost = [ln for ln in log.read_text().splitlines() if "lease lost" in ln]
    assert lost, "the woken worker said it had lost the run"


async def test_a_worker_that_loses_its_own_lease_by_a_stall_charges_the_run_nothing(
    pg_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool that blocks the event loop past the lease (a starved process) loses the run to
    its own worker's lease timer, again and again; each time the worker takes the run back,
    and that is no crash: the run is never parked as a crash loop, and finishes. The log says
    the lease ran out, not that another worker took the run (there is none)."""
    caplog.set_level(logging.WARNING, "tether.supervisor")
    stalls: list[int] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def crunch() -> str:
        """Crunch numbers (holding the event loop, as a CPU-bound tool would)."""
        stalls.append(1)
        time.sleep(0.8)  # past the 0.5 s lease: renewals cannot run meanwhile
        return "crunched"

    def script(messages: list[Message]) -> Any:
        step = sum(1 for m in messages if m["role"] == "assistant")
        if step < 5:
            return [tether.ScriptedModel.tool_use(f"toolu_{step}", "crunch", {})]
        return "done"

    store = PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=0.5)
    async with Supervisor(
        store,
        model=tether.ScriptedModel(script),
        tools=tools,
        sweep_interval=0.1,
        restart_backoff=0.01,
        max_restarts=2,
    ) as sup:
        await sup.start("run-stalls", "crunch")
        with anyio.fail_after(60):
            while (view := await sup.inspect("run-stalls")).status.value != "done":
                assert view.status.value != "needs_attention", view.reason
                await anyio.sleep(0.05)
    assert len(stalls) >= 5
    assert view.restarts == 0
    events = await store_events(pg_dsn, pg_schema, "run-stalls")
    resumes = [e for e in events if isinstance(e, Resumed)]
    assert resumes
    assert all(not e.charged and "lease ran out" in e.cause for e in resumes)
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "tether.supervisor" and "lease lost" in r.getMessage()
    ]
    assert said
    for message in said:
        assert "another worker" not in message
        assert "lease lost: its lease ran out before it could be renewed" in message
        assert "the next worker to claim the run resumes it (this one too" in message
    assert not any("by another process" in r.getMessage() for r in caplog.records)


async def store_events(dsn: str, schema: str, run_id: str) -> list[Any]:
    async with PostgresStore(dsn, schema=schema) as store:
        return await store.read(run_id)
