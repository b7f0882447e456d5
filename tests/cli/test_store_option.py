"""``--store URL`` (and ``--schema``) for the operator commands and ``tether worker``.

Against a real PostgreSQL server: runs made by a ``Supervisor`` on a ``PostgresStore`` are
listed, shown, answered, cancelled and collected from the command line, as with ``--root``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest

import tether
from tether.cli import build_parser, main
from tether.cli._worker import _say_if_new
from tether.journal import AnyEvent, Decision, Event, RunStarted
from tether.postgres import PostgresStore
from tether.supervisor import RunStatus, Supervisor, fold
from tether.supervisor._loop import Runtime, build_manifest
from tether.testing._pgserver import free_port

from .._cli import run_tether
from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ..supervisor import _ledger_app
from ._stores import (
    APPROVE,
    BLOB_THRESHOLD,
    DONE,
    FAILED,
    REFUND_CALL,
    WAIT,
    Env,
    cli,
    cli_async,
    finished_run,
    start_resting_runs,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
SECRET = "s3cret-pw"


@dataclass
class PgEnv:
    """A PostgreSQL store (a schema of its own) with a parked, a done and a failed run."""

    dsn: str
    schema: str
    app: Env = field(default_factory=lambda: Env(pathlib.Path("unused")))

    @property
    def opts(self) -> tuple[str, ...]:
        return ("--store", self.dsn, "--schema", self.schema)

    def store(self) -> PostgresStore:
        return PostgresStore(self.dsn, schema=self.schema, blob_threshold=BLOB_THRESHOLD)

    async def build(self) -> None:
        async with Supervisor(self.store(), model=self.app.model(), tools=self.app.tools()) as sup:
            await start_resting_runs(sup)

    async def resume(self, run_id: str, until: RunStatus | None = None) -> tether.RunView:
        """Enter a supervisor on the store; return the run once it rests (with ``until``)."""
        async with Supervisor(self.store(), model=self.app.model(), tools=self.app.tools()) as sup:
            await sup.wait(run_id, timeout=WAIT)
            with anyio.fail_after(WAIT):
                # An answer from the inbox is taken by a child the first sweep starts just
                # after it classified the run as parked.
                while until is not None and (await sup.inspect(run_id)).status is not until:
                    await anyio.sleep(0.02)
            return await sup.inspect(run_id)

    async def events(self, run_id: str) -> list[AnyEvent]:
        async with self.store() as store:
            return await store.read(run_id)

    async def craft(self, run_id: str, events: Sequence[Event]) -> None:
        """A run holding ``events`` as given (their ``at`` is kept)."""
        async with self.store() as store:
            journal = await store.create(run_id)
            async with journal:
                for event in events:
                    await journal.append([event])

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        """Rows of ``query``, where ``{s}`` is the store's schema."""
        async with self.store() as store:
            return list(await store.pool.fetch(query.format(s=self.schema), *args))

    async def runs(self) -> set[str]:
        return {r[0] for r in await self.fetch("SELECT run_id FROM {s}.runs")}

    async def blobs(self) -> set[str]:
        return {r[0] for r in await self.fetch("SELECT digest FROM {s}.blobs")}


@pytest.fixture
def pg(pg_dsn: str, pg_schema: str) -> PgEnv:  # noqa: F811
    env = PgEnv(pg_dsn, pg_schema)
    anyio.run(env.build)
    return env


def _with_password(dsn: str) -> str:
    """``dsn`` with a password (the test server trusts loopback connections: it is ignored)."""
    scheme, _, rest = dsn.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user}:{SECRET}@{host}"


def _digest(content: str) -> str:
    return hashlib.sha256(msgspec.msgpack.encode(content)).hexdigest()


# ---------------------------------------------------------------------------- runs and show


def test_runs_table_and_json(pg: PgEnv, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "runs", *pg.opts)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["RUN", "STATUS", "AGE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {APPROVE, DONE, FAILED}
    assert rows[APPROVE].split()[1:6] == ["waiting_for_approval", "0s", "1", "0", "0"]
    assert f"awaiting approval: {REFUND_CALL} issue_refund" in rows[APPROVE]
    assert rows[DONE].split()[1:6] == ["done", "0s", "2", "1", "0"]
    assert "model call budget exhausted: 1 of 1" in rows[FAILED]

    code, out, _ = cli(capsys, "runs", *pg.opts, "--json")
    assert code == 0
    runs = {r["run_id"]: r for r in json.loads(out)}
    assert {k: v["status"] for k, v in runs.items()} == {
        APPROVE: "waiting_for_approval",
        DONE: "done",
        FAILED: "failed",
    }
    assert runs[APPROVE]["waiting"][0]["call_id"] == REFUND_CALL
    assert runs[DONE]["final_text"] == "all done"
    assert all(r["held_by"] is None and r["readable"] for r in runs.values())

    code, out, _ = cli(capsys, "runs", *pg.opts, "--json", "--status", "done")
    assert [r["run_id"] for r in json.loads(out)] == [DONE]


def test_runs_on_an_empty_schema(
    pg_dsn: str,  # noqa: F811
    pg_schema: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def create() -> None:  # a worker creates the schema; it has no runs yet
        async with PostgresStore(pg_dsn, schema=pg_schema):
            pass

    anyio.run(create)
    code, out, _ = cli(capsys, "runs", "--store", pg_dsn, "--schema", pg_schema)
    assert code == 0
    assert out == f"no runs in {pg_dsn} (schema {pg_schema})\n"


async def test_runs_shows_who_holds_a_run(pg: PgEnv, capsys: pytest.CaptureFixture[str]) -> None:
    async with pg.store() as other, await other.open(APPROVE):
        code, out, _ = await cli_async(capsys, "runs", *pg.opts, "--json")
        assert code == 0
        run = next(r for r in json.loads(out) if r["run_id"] == APPROVE)
        assert (run["status"], run["held_by"]) == ("running", other.owner)
        code, out, _ = await cli_async(capsys, "runs", *pg.opts)
        assert f"held by worker {other.owner}" in out
    code, out, _ = await cli_async(capsys, "runs", *pg.opts, "--json")
    run = next(r for r in json.loads(out) if r["run_id"] == APPROVE)
    assert (run["status"], run["held_by"]) == ("waiting_for_approval", None)


def test_show_never_prints_the_password(pg: PgEnv, capsys: pytest.CaptureFixture[str]) -> None:
    opts = ("--store", _with_password(pg.dsn), "--schema", pg.schema)
    code, out, err = cli(capsys, "show", *opts, APPROVE)
    assert (code, err) == (0, "")
    assert out.startswith(f"run {APPROVE}: waiting_for_approval (awaiting approval: ")
    hint = f"tether approve|reject --store {pg.dsn} --schema {pg.schema} {APPROVE} {REFUND_CALL}"
    assert f"{hint} --by NAME" in out
    assert SECRET not in out

    code, out, _ = cli(capsys, "show", *opts, DONE, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["summary"]["status"] == "done"
    assert data["events"][3]["blob"]["size"] == 303  # the lookup's result is in the blobs table

    code, out, err = cli(capsys, "show", *opts, "run-nope")
    assert code == 1
    assert err == f"tether: no run 'run-nope' in {pg.dsn} (schema {pg.schema})\n"


# ---------------------------------------------------------------------------- answers


def test_approve_then_a_supervisor_finishes_the_run(
    pg: PgEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "approve", *pg.opts, APPROVE, REFUND_CALL, "--by", "priya")
    assert (code, err) == (0, "")
    assert f"recorded: approved {REFUND_CALL} issue_refund" in out
    assert "(seq 2)" in out
    last = anyio.run(pg.events, APPROVE)[-1]
    assert isinstance(last, Decision)
    assert (last.call_id, last.approved, last.by) == (REFUND_CALL, True, "priya")
    assert pg.app.refunds == []
    # The command released its lease: any worker may take the run.
    owners = anyio.run(pg.fetch, "SELECT owner FROM {s}.runs WHERE run_id = $1", APPROVE)
    assert [r[0] for r in owners] == [None]

    view = anyio.run(pg.resume, APPROVE)
    assert view.status is RunStatus.DONE
    assert view.final_text == "refund handled"
    assert pg.app.refunds == ["o-1"]

    code, _, err = cli(capsys, "approve", *pg.opts, APPROVE, REFUND_CALL, "--by", "sam")
    assert code == 1
    assert "refused" in err


async def test_an_answer_for_a_held_run_waits_in_its_inbox(
    pg: PgEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    async with pg.store() as other, await other.open(APPROVE):
        code, out, err = await cli_async(
            capsys, "reject", *pg.opts, APPROVE, REFUND_CALL, "--by", "sam", "--note", "no"
        )
        assert (code, err) == (0, "")
        assert "queued: another process is advancing the run" in out
        assert await other.has_inbox(APPROVE)
    view = await pg.resume(APPROVE, until=RunStatus.DONE)
    assert view.final_text == "refund handled"
    assert pg.app.refunds == []
    decisions = [e for e in await pg.events(APPROVE) if isinstance(e, Decision)]
    assert [(d.approved, d.by, d.note) for d in decisions] == [(False, "sam", "no")]


def test_cancel(pg: PgEnv, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "cancel", *pg.opts, APPROVE, "--reason", "duplicate ticket")
    assert code == 0
    assert f"recorded: run {APPROVE} cancelled: duplicate ticket (seq 2)" in out
    code, out, _ = cli(capsys, "runs", *pg.opts, "--status", "cancelled")
    assert APPROVE in out
    code, _, err = cli(capsys, "cancel", *pg.opts, APPROVE)
    assert code == 1
    assert "run already finished (cancelled)" in err
    status = anyio.run(pg.fetch, "SELECT status FROM {s}.runs WHERE run_id = $1", APPROVE)
    assert status[0][0] == "cancelled"  # no worker sweeps it any more


# ---------------------------------------------------------------------------- gc

OLD = {"old-done", "old-cancelled", "ancient-failed", "old-held"}


async def _age(pg: PgEnv) -> str:
    """Add old finished runs and an orphan blob; return the orphan's digest."""
    await pg.craft("old-done", finished_run("old-done", "done", 10, big="a" * 300))
    await pg.craft("old-cancelled", finished_run("old-cancelled", "cancelled", 8))
    await pg.craft("old-failed", finished_run("old-failed", "failed", 10))
    await pg.craft("ancient-failed", finished_run("ancient-failed", "failed", 40, big="b" * 300))
    await pg.craft("old-held", finished_run("old-held", "done", 20))
    orphan = hashlib.sha256(b"orphan").hexdigest()
    await pg.fetch("INSERT INTO {s}.blobs (digest, data) VALUES ($1, $2)", orphan, b"orphan")
    return orphan


async def test_gc_dry_run_then_for_real(pg: PgEnv, capsys: pytest.CaptureFixture[str]) -> None:
    orphan = await _age(pg)
    live_blob = _digest("x" * 300)  # the done run's lookup result
    gone_blobs = {_digest("a" * 300), _digest("b" * 300), orphan}
    assert await pg.blobs() == gone_blobs | {live_blob}
    before = await pg.runs()

    code, out, err = await cli_async(capsys, "gc", *pg.opts, "--dry-run")
    assert (code, err) == (0, "")
    would = {line.split()[3] for line in out.splitlines() if line.startswith("would remove run")}
    assert would == OLD
    assert "would remove run old-done (done 10d00h ago)" in out
    assert {line.split()[3] for line in out.splitlines() if "would remove blob" in line} == (
        gone_blobs
    )
    assert "dry run: would remove 4 run(s) and 3 blob(s)" in out
    assert (
        "kept 1 unfinished, 3 finished within their window, 0 old but held by a process, "
        "0 unreadable" in out
    )
    assert (await pg.runs(), await pg.blobs()) == (before, gone_blobs | {live_blob})

    # A worker that died holding a finished run: its lease expired, the run goes.
    await pg.fetch(
        "UPDATE {s}.runs SET owner = 'dead-worker', expires_at = now() - interval '1 hour' "
        "WHERE run_id = 'old-cancelled'"
    )
    async with pg.store() as other, await other.open("old-held"):
        code, out, err = await cli_async(capsys, "gc", *pg.opts)
        assert (code, err) == (0, "")
        assert "kept run old-held: its journal is held by another process" in out
        assert "removed run old-cancelled (cancelled 8d00h ago)" in out
        assert "removed 3 run(s) and 0 blob(s)" in out
        assert "blobs not collected: 3 unreferenced blob(s) kept" in out
        assert "old-held" in out
        assert await pg.runs() == before - {"old-done", "old-cancelled", "ancient-failed"}
        assert orphan in await pg.blobs()

    code, out, err = await cli_async(capsys, "gc", *pg.opts)
    assert (code, err) == (0, "")
    assert "removed run old-held (done 20d00h ago)" in out
    assert f"removed blob {orphan} (6 bytes)" in out
    assert "removed 1 run(s) and 3 blob(s) (612 bytes)" in out
    assert await pg.runs() == {APPROVE, DONE, FAILED, "old-failed"}
    assert await pg.blobs() == {live_blob}
    leftovers = await pg.fetch(
        "SELECT count(*) FROM {s}.events WHERE run_id = ANY($1::text[])", sorted(OLD)
    )
    assert leftovers[0][0] == 0

    code, out, _ = await cli_async(capsys, "gc", *pg.opts)
    assert "removed 0 run(s) and 0 blob(s)" in out

    # Tighter windows: recent finished runs go too, unfinished ones never.
    code, out, _ = await cli_async(
        capsys, "gc", *pg.opts, "--keep-days", "0", "--keep-failed-days", "0"
    )
    assert code == 0
    assert await pg.runs() == {APPROVE}
    assert await pg.blobs() == set()
    assert (await pg.resume(APPROVE)).status is RunStatus.WAITING_FOR_APPROVAL


# ---------------------------------------------------------------------------- errors and usage


def test_bad_urls_and_unreachable_servers(
    pg_dsn: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = free_port()  # nothing listens there
    refused = f"postgresql://tether:{SECRET}@127.0.0.1:{port}/tether"
    for argv in (
        ("runs", "--store", refused),
        ("show", "--store", refused, "run-1"),
        ("approve", "--store", refused, "run-1", "c1", "--by", "x"),
        ("cancel", "--store", refused, "run-1"),
        ("gc", "--store", refused, "--dry-run"),
    ):
        code, out, err = cli(capsys, *argv)
        assert (code, out) == (3, ""), argv
        assert err.startswith(
            f"tether: cannot connect to postgresql://tether@127.0.0.1:{port}/tether "
            "(schema tether): "
        ), err
        assert SECRET not in err

    code, _, err = cli(capsys, "runs", "--store", f"postgresql://u:{SECRET}@127.0.0.1:nope/db")
    assert code == 3
    assert err.startswith("tether: postgresql://u@127.0.0.1:nope/db: ")
    assert "Port could not be cast" in err
    assert SECRET not in err

    scheme, _, rest = pg_dsn.partition("://")
    nobody = f"{scheme}://nobody:{SECRET}@{rest.partition('@')[2]}"
    code, _, err = cli(capsys, "runs", "--store", nobody)
    assert code == 3
    assert 'role "nobody" does not exist' in err
    assert SECRET not in err
    assert "Traceback" not in err


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_usage_errors(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql://tether@127.0.0.1/tether"
    err = _usage_error(capsys, "runs", "--root", str(tmp_path), "--store", url)
    assert "argument --store: not allowed with argument --root" in err
    err = _usage_error(capsys, "approve", "run-1", "c1", "--by", "x")
    assert "one of the arguments --root --store is required" in err
    err = _usage_error(capsys, "runs", "--root", str(tmp_path), "--schema", "other")
    assert "--schema applies only to a PostgreSQL --store" in err
    err = _usage_error(capsys, "gc", "--store", url, "--schema", "Bad-Name")
    assert "schema name 'Bad-Name'" in err
    err = _usage_error(capsys, "runs", "--store", "mysql://u:pw@h/db")
    assert "mysql:// is not a store" in err
    assert "pw" not in err
    err = _usage_error(
        capsys, "worker", "--root", str(tmp_path), "--lease-ttl", "5", "--app", "m:f"
    )
    assert "--lease-ttl applies only to a PostgreSQL --store" in err
    err = _usage_error(capsys, "worker", "--store", url, "--lease-ttl", "0", "--app", "m:f")
    assert "must be more than 0" in err
    err = _usage_error(
        capsys, "worker", "--root", str(tmp_path), "--store-wait", "5", "--app", "m:f"
    )
    assert "--store-wait applies only to a PostgreSQL --store" in err
    err = _usage_error(capsys, "worker", "--store", url, "--store-wait", "-1", "--app", "m:f")
    assert "must be 0 or more, not '-1'" in err


def test_store_with_a_directory_means_root(
    env: Env, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "runs", "--store", env.r, "--json")[1].count('"run_id"') == 4
    code, out, _ = cli(capsys, "show", "--store", env.r, APPROVE)
    assert code == 0
    assert f"tether approve|reject --store {env.r} {APPROVE} {REFUND_CALL} --by NAME" in out
    code, out, _ = cli(capsys, "cancel", "--store", env.r, APPROVE)
    assert code == 0
    code, _, err = cli(capsys, "runs", "--store", str(tmp_path / "nowhere"))
    assert code == 3
    assert "no such directory (give the store's --store)" in err


@pytest.mark.parametrize(
    "command", ["runs", "show", "approve", "reject", "resolve", "cancel", "gc", "worker"]
)
def test_help_names_both_kinds_of_store(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--root DIR", "--store URL", "--schema NAME", "postgresql://", "PostgreSQL"):
        assert text in out, text


# ---------------------------------------------------------------------------- worker


async def _create_runs(store: PostgresStore, ids: list[str]) -> None:
    """Runs that exist but that no process has started: a worker resumes them."""
    rt = Runtime(model=_ledger_app.make_model(), tools=_ledger_app.tools, load_blob=store.load_blob)
    manifest = build_manifest(rt, system=None, app_version="")
    for run_id in ids:
        started = RunStarted(
            run_id=run_id, manifest=manifest, messages=[{"role": "user", "content": run_id}]
        )
        await (await store.create(run_id, [started])).aclose()


async def test_worker_serves_a_postgres_store(
    pg_dsn: str,  # noqa: F811
    pg_schema: str,  # noqa: F811
    tmp_path: pathlib.Path,
) -> None:
    ids = [f"run-{i}" for i in range(6)]
    ledger = tmp_path / "ledger.jsonl"
    async with PostgresStore(pg_dsn, schema=pg_schema) as store:
        await _create_runs(store, ids)
        log = tmp_path / "worker.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "tether.cli", "worker", "--quiet",
                    "--store", _with_password(pg_dsn), "--schema", pg_schema,
                    "--lease-ttl", "5", "--app", "tests.supervisor._ledger_app:app",
                ],
                cwd=REPO,
                env={**os.environ, "TETHER_TEST_LEDGER": str(ledger)},
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                finished = [fold(await store.read(run_id)).finished for run_id in ids]
                if all(f is not None for f in finished):
                    break
                await anyio.sleep(0.1)
            assert [f.status if f else None for f in finished] == ["done"] * len(ids)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(proc.wait, 30)
        assert code == 0, log.read_text()
        owners = await store.pool.fetch(f"SELECT DISTINCT owner FROM {pg_schema}.runs")
        assert [r[0] for r in owners] == [None]  # the worker released every lease
    keys = [json.loads(line)["key"] for line in ledger.read_text().splitlines()]
    assert sorted(keys) == sorted(f"{run_id}:toolu_2" for run_id in ids)
    assert SECRET not in log.read_text()


def test_worker_reports_an_unreachable_server(tmp_path: pathlib.Path) -> None:
    """With ``--store-wait 0`` it tries once (waiting is ``tests/postgres/test_worker_startup``'s
    subject)."""
    url = f"postgresql://tether:{SECRET}@127.0.0.1:{free_port()}/tether"
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", "worker", "--store", url, "--store-wait", "0",
         "--app", "tests.supervisor._ledger_app:app"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "tether: cannot connect to postgresql://tether@127.0.0.1:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert SECRET not in proc.stderr


def test_worker_refuses_a_root_that_is_a_file(tmp_path: pathlib.Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    proc = run_tether("worker", "--root", str(a_file), "--app", "tests.supervisor._ledger_app:app")
    assert proc.returncode == 3, proc.stderr
    assert f"tether: {a_file}: not a directory (give the store's --root)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert a_file.read_text() == "x"


def test_operator_commands_never_create_a_schema(
    pg_dsn: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "runs", "--store", pg_dsn, "--schema", "no_such_store")
    assert (code, out) == (3, "")
    assert "holds no tether store" in err

    async def schemas() -> list[str]:
        conn = await asyncpg.connect(pg_dsn)
        try:
            rows = await conn.fetch("SELECT nspname FROM pg_namespace")
        finally:
            await conn.close()
        return [r[0] for r in rows]

    assert "no_such_store" not in anyio.run(schemas)


@pytest.mark.parametrize("exists", [False, True])
def test_worker_says_when_it_creates_a_new_store(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, exists: bool
) -> None:
    """A worker creates the store it serves (a first deploy), but a mistyped ``--root`` would
    then be served, empty, for good: it says so when the directory did not exist."""
    root = tmp_path / "tether-dtaa"
    if exists:
        root.mkdir()
    args = build_parser().parse_args(["worker", "--root", str(root), "--app", "m:f"])
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        _say_if_new(args)
    said = [r.getMessage() for r in caplog.records if r.name == "tether.worker"]
    if exists:
        assert said == []
    else:
        assert said == [
            f"{root} did not exist: a new, empty store is made there (if you meant an existing "
            "store, stop this worker and check --root)"
        ]
