"""A ``tether worker`` started while its PostgreSQL server is down or in recovery waits for it.

Real worker processes against a server of this module's own (stopped, started again, held in
recovery and promoted; the session's server is left alone). A worker that starts while the
database cannot be reached yet logs what it waits for at each try, comes up once the server
is back and drives its runs to done; past ``--store-wait`` it exits 3 with the reason; a
mistake (a wrong password, a role or database that does not exist, a newer schema) exits 3 at
once, without waiting.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from tether.journal import Resumed
from tether.postgres import PostgresStore
from tether.supervisor import RunStatus, Supervisor, fold
from tether.testing._pgserver import PostgresServer, free_port

from .._cli import run_tether
from ..cli.test_store_option import _create_runs
from ..supervisor._helpers import delivery_app
from ..supervisor._worker_proc import MOMENTS, WAIT, Storm, lines, start, until
from ..supervisor._worker_proc import stop as stop_worker
from .conftest import require_postgres

APP = "tests.supervisor._ledger_app:app"
WAITING = "WARNING tether.postgres: waiting for postgresql://127.0.0.1:"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server for this module alone: its tests stop it and hold it in recovery."""
    require_postgres()
    with PostgresServer() as srv:
        yield srv


@pytest.fixture
def schema(server: PostgresServer) -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


class Fleet:
    """Runs in a schema of the module's server, and the worker processes serving them."""

    def __init__(self, tmp: pathlib.Path, server: PostgresServer, schema: str) -> None:
        self.server, self.schema = server, schema
        self.ledger = tmp / "ledger.jsonl"
        self.log = tmp / "worker.log"
        self.ids = [f"run-{i}" for i in range(4)]

    def store(self) -> PostgresStore:
        return PostgresStore(self.server.dsn, schema=self.schema)

    def create_runs(self) -> None:
        async def create() -> None:
            async with self.store() as store:
                await _create_runs(store, self.ids)

        anyio.run(create)

    def worker(self, *extra: str) -> subprocess.Popen[bytes]:
        args = ["--store", self.server.dsn, "--schema", self.schema, "--lease-ttl", "5"]
        return start(
            [*args, *extra, "--app", APP],
            log=self.log,
            env={"TETHER_TEST_LEDGER": str(self.ledger)},
        )

    def waits(self) -> list[str]:
        return [line for line in lines(self.log) if WAITING in line]

    def statuses(self) -> list[str | None]:
        async def read() -> list[str | None]:
            async with self.store() as store:
                finished = [fold(await store.read(run_id)).finished for run_id in self.ids]
                return [f.status if f else None for f in finished]

        return anyio.run(read)

    def owners(self) -> list[str | None]:
        async def read() -> list[str | None]:
            async with self.store() as store:
                rows = await store.pool.fetch(f"SELECT owner FROM {self.schema}.runs")
                return [r[0] for r in rows]

        return anyio.run(read)

    def delivered(self) -> list[str]:
        return sorted(json.loads(line)["key"] for line in lines(self.ledger))

    @contextmanager
    def started_while_away(
        self, tries: int, *, recovery: bool = False
    ) -> Iterator[subprocess.Popen[bytes]]:
        """A worker started while the server is stopped (or, with ``recovery``, held in
        recovery), once it has tried ``tries`` times; the server is back after the block."""
        self.create_runs()
        self.server.kill()
        if recovery:
            self.server.start_in_recovery()  # connections refused with 57P03 until promoted
        try:
            proc = self.worker("--store-wait", "120")
            until(lambda: len(self.waits()) >= tries, f"{tries} tries", running=proc)
            yield proc
        finally:
            if recovery:
                self.server.promote()
            else:
                self.server.start_again()


def _served_after_outage(fleet: Fleet, proc: subprocess.Popen[bytes]) -> None:
    done = ["done"] * len(fleet.ids)
    until(lambda: fleet.statuses() == done, "the runs to be done", running=proc)
    assert stop_worker(proc) == 0, fleet.log.read_text()
    assert fleet.delivered() == sorted(f"{run_id}:toolu_2" for run_id in fleet.ids)
    assert fleet.owners() == [None] * len(fleet.ids)  # every lease released


@pytest.mark.slow
def test_a_worker_started_while_the_server_is_down_waits_and_then_serves(
    tmp_path: pathlib.Path, server: PostgresServer, schema: str
) -> None:
    fleet = Fleet(tmp_path, server, schema)
    with fleet.started_while_away(3) as proc:
        pass
    _served_after_outage(fleet, proc)
    waits = fleet.waits()
    assert "ConnectionRefusedError" in waits[0]
    assert f"(schema {schema})" in waits[0]
    assert "trying again in" in waits[0]
    print(f"tries while the server was down: {len(waits)}")


@pytest.mark.slow
def test_a_worker_started_while_the_server_is_in_recovery_waits_for_the_promotion(
    tmp_path: pathlib.Path, server: PostgresServer, schema: str
) -> None:
    fleet = Fleet(tmp_path, server, schema)
    with fleet.started_while_away(3, recovery=True) as proc:
        pass
    _served_after_outage(fleet, proc)
    waits = fleet.waits()
    assert "the database system is not accepting connections" in waits[0]
    assert "CannotConnectNowError" in waits[0]
    print(f"tries while the server was in recovery: {len(waits)}")


def test_a_worker_gives_up_after_store_wait_with_the_reason(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "worker.log"
    url = f"postgresql://tether:pw@127.0.0.1:{free_port()}/tether"  # nothing listens there
    proc = start(["--store", url, "--store-wait", "1", "--app", APP], log=log)
    assert proc.wait(60) == 3
    text = log.read_text()
    assert len([line for line in text.splitlines() if WAITING in line]) >= 1
    last = text.splitlines()[-1]
    assert last.startswith("tether: postgresql://127.0.0.1:"), last
    assert "(schema tether): still unreachable after waiting 1 s: ConnectionRefusedError" in last
    assert "Traceback" not in text
    assert "pw" not in text.replace("postgresql", "")


def _newer_schema(server: PostgresServer, schema: str) -> None:
    async def bump() -> None:
        async with PostgresStore(server.dsn, schema=schema) as store:
            await store.pool.execute(f"UPDATE {schema}.meta SET value = '999'")

    anyio.run(bump)


@pytest.mark.parametrize("mistake", ["password", "role", "database", "schema"])
def test_a_mistake_fails_at_once_without_waiting(
    tmp_path: pathlib.Path, server: PostgresServer, schema: str, mistake: str
) -> None:
    """With a wait of ten minutes, a worker given a wrong password, a role or a database that
    does not exist, or a schema newer than it knows exits 3 with the reason and no try more
    (the test's own timeout would catch a wait)."""
    port = server.port
    if mistake == "password":
        dsn = server.password_role("guarded", "right")
        url = dsn.replace("guarded@", "guarded:wrong@")
        expected = 'password authentication failed for user "guarded"'
    elif mistake == "role":
        url = f"postgresql://nobody@127.0.0.1:{port}/tether"
        expected = 'role "nobody" does not exist'
    elif mistake == "database":
        url = f"postgresql://tether@127.0.0.1:{port}/no_such_db"
        expected = 'database "no_such_db" does not exist'
    else:
        url = server.dsn
        _newer_schema(server, schema)
        expected = "at version 999; this tether knows up to"
    log = tmp_path / "worker.log"
    proc = start(["--store", url, "--schema", schema, "--store-wait", "600", "--app", APP], log=log)
    assert proc.wait(60) == 3
    text = log.read_text()
    assert expected in text.splitlines()[-1], text
    assert WAITING not in text
    assert "Traceback" not in text


async def test_a_supervisor_entering_a_store_whose_server_is_down_waits_for_it(
    server: PostgresServer, schema: str
) -> None:
    """In-process: ``Supervisor(PostgresStore(...))`` entered while the server is down comes
    up once it is started again, and runs a run to done."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    await anyio.to_thread.run_sync(server.kill)
    entered = anyio.Event()

    async def bring_back() -> None:
        await anyio.sleep(1.0)  # a few tries fail first
        assert not entered.is_set()
        await anyio.to_thread.run_sync(server.start_again)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(bring_back)
            store = PostgresStore(server.dsn, schema=schema, start_wait=60)
            async with Supervisor(store, model=model, tools=tools) as sup:
                entered.set()
                await sup.start("run-1", "item x")
                assert await sup.wait("run-1", timeout=30) is RunStatus.DONE
    assert ledger == Counter({"run-1:toolu_2": 1})


def test_operator_commands_still_try_once() -> None:
    """A person at a terminal is told at once: ``tether runs`` does not wait."""
    proc = run_tether("runs", "--store", f"postgresql://tether@127.0.0.1:{free_port()}/tether")
    assert proc.returncode == 3
    assert "cannot connect to" in proc.stderr
    assert "waiting for" not in proc.stderr


def test_a_signal_while_waiting_for_the_store_is_a_clean_exit(
    tmp_path: pathlib.Path, server: PostgresServer, schema: str
) -> None:
    fleet = Fleet(tmp_path, server, schema)
    with fleet.started_while_away(1) as proc:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    assert "SIGTERM while opening the store: stopping before serving" in fleet.log.read_text()
    assert fleet.statuses() == [None] * len(fleet.ids)  # nothing was touched
    assert fleet.owners() == [None] * len(fleet.ids)


@pytest.mark.slow
def test_signals_at_moments_of_start_up_leave_no_lease_behind(
    tmp_path: pathlib.Path, server: PostgresServer, schema: str
) -> None:
    """Leases of 30 s: a worker that left one behind would keep the next from its run that
    long; each checks that every lease was released as the worker went."""
    fleet = Fleet(tmp_path, server, schema)
    fleet.create_runs()
    storm = Storm(tmp_path, ["--store", server.dsn, "--schema", schema, "--lease-ttl", "30"])
    moments: list[str | float] = [*MOMENTS, 0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.2]
    for when in moments:
        stop = storm.signal(when)
        assert fleet.owners() == [None] * len(fleet.ids), stop
    print(storm.check())
    assert {s.when for s in storm.stops if s.first_line} >= set(MOMENTS)
    proc, log = storm.worker()
    until(lambda: any(": serving " in line for line in lines(log)), "serving", running=proc)
    done = ["done"] * len(fleet.ids)
    until(lambda: fleet.statuses() == done, "the runs to be done", running=proc)
    assert stop_worker(proc) == 0, log.read_text()
    assert fleet.delivered() == sorted(f"{run_id}:toolu_2" for run_id in fleet.ids)

    async def charged() -> list[object]:
        async with fleet.store() as store:
            events = [e for r in fleet.ids for e in await store.read(r)]
        return [e for e in events if isinstance(e, Resumed) and e.charged]

    assert anyio.run(charged) == []
