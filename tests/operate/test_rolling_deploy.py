"""A rolling deploy: a worker of the new application beside one of the old, on one store.

The new worker lacks the contract the runs in flight pinned; it leaves them to the old worker,
which still has it and says so in the store (``supervisor._fleet``), instead of parking them for
a person: every run finishes on the old implementation, and nothing is parked.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import anyio
import pytest

from tether._store_url import store_for
from tether.journal import Parked, Retried
from tether.supervisor import Supervisor, fold

from .._cli import REPO
from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from . import _rolling_app

RUNS = 6


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[list[str]]:
    if request.param == "file":
        yield ["--root", str(tmp_path / "store")]
    else:
        dsn = request.getfixturevalue("pg_dsn")
        yield ["--store", dsn, "--schema", request.getfixturevalue("pg_schema")]


def _store(where: list[str]) -> object:
    return store_for(where[1]) if where[0] == "--root" else store_for(where[1], schema=where[3])


async def _create(where: list[str]) -> list[str]:
    v1 = _rolling_app.v1()
    ids = [f"run-{i}" for i in range(RUNS)]
    async with Supervisor(_store(where), model=v1.model, tools=v1.tools, resume=False) as sup:  # type: ignore[arg-type]
        for run_id in ids:
            await sup.start(run_id, "help the customer", drive=False)
    return ids


async def _events(where: list[str], ids: list[str]) -> dict[str, list[object]]:
    async with _store(where) as store:  # type: ignore[attr-defined]
        return {run_id: await store.read(run_id) for run_id in ids}


def _worker(
    where: list[str], deploy: str, env: dict[str, str], log: pathlib.Path
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", *where,
             "--app", f"tests.operate._rolling_app:{deploy}"],
            cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # (if it was left paused by a failure)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_new_worker_leaves_runs_it_cannot_continue_to_the_old_one(
    where: list[str], tmp_path: pathlib.Path
) -> None:
    ledger, old_log, new_log = tmp_path / "ledger", tmp_path / "old.log", tmp_path / "new.log"
    env = {"TETHER_TEST_LEDGER": str(ledger)}
    old = _worker(where, "v1", env, old_log)
    new = None
    try:
        deadline = time.monotonic() + 60
        while "serving" not in old_log.read_text():  # the old worker has said what it runs
            assert old.poll() is None, old_log.read_text()
            assert time.monotonic() < deadline, old_log.read_text()
            time.sleep(0.05)
        # The old worker is paused while the runs come in (its advertisement stays live), so
        # the new one meets every run first, and must leave it, however fast the old one is.
        old.send_signal(signal.SIGSTOP)
        new = _worker(where, "v2", env, new_log)
        while "serving" not in new_log.read_text():  # up and sweeping before the runs come in
            assert new.poll() is None, new_log.read_text()
            assert time.monotonic() < deadline, new_log.read_text()
            time.sleep(0.05)
        ids = anyio.run(_create, where)
        while new_log.read_text().count("which has its pinned contracts") < RUNS:
            assert new.poll() is None, new_log.read_text()
            assert time.monotonic() < deadline, new_log.read_text()[-3000:]
            time.sleep(0.05)
        old.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 90
        while True:
            events = anyio.run(_events, where, ids)
            if all(fold(e).finished is not None for e in events.values()):  # type: ignore[arg-type]
                break
            assert time.monotonic() < deadline, new_log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        if new is not None:
            _stop(new)
        _stop(old)
    for run_id, run in events.items():
        state = fold(run)  # type: ignore[arg-type]
        assert state.finished is not None
        assert state.finished.status == "done", (run_id, state.finished.reason)
        assert not [e for e in run if isinstance(e, Parked | Retried)], run_id
    notified = ledger.read_text().splitlines()
    assert sorted(line.split()[2] for line in notified) == sorted(f"{i}:toolu_n" for i in ids)
    assert {line.split()[0] for line in notified} == {"v1"}  # the old implementation
    assert {line.split()[1] for line in notified} == {str(old.pid)}
    assert "which has its pinned contracts" in new_log.read_text()
