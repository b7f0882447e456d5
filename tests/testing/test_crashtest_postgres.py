"""``run_crashtest`` and ``tether crashtest`` with the runs in PostgreSQL (``store=URL``).

Every case runs in a schema of its own of the test server's database; the children open it with
``store_for`` and the harness reads the runs and records the approvals through the ``Store``
protocol. A killed child's lease stays live until it runs out, and the resuming child must wait
for it: the shipped scenario still comes out as an uninterrupted run did, and the broken
example's duplicate is still caught.
"""

from __future__ import annotations

import json
import pathlib
import re

import anyio
import pytest

import examples.broken
from tether.cli import main
from tether.postgres import PostgresStore
from tether.testing import CrashtestError, assert_crash_safe, run_crashtest

from ..postgres.conftest import pg_dsn, pg_server  # noqa: F401
from .test_crashtest import POINTS, _check_safe, check_waits


def _crash_schemas(dsn: str) -> set[str]:
    """The harness's schemas in the database."""

    async def query() -> set[str]:
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'crash\\_%'"
            )
        finally:
            await conn.close()
        return {r[0] for r in rows}

    return anyio.run(query)


def _events(dsn: str, schema: str, run_id: str) -> int:
    async def read() -> int:
        async with PostgresStore(dsn, schema=schema) as store:
            return len(await store.read(run_id))

    return anyio.run(read)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_shipped_scenario_survives_a_kill_at_every_point_on_postgres(pg_dsn: str) -> None:  # noqa: F811
    before = _crash_schemas(pg_dsn)
    report = assert_crash_safe(
        "examples.kitebase:scenario", double=1, min_points=12, store=pg_dsn, workers=3
    )
    _check_safe(report)
    assert report.points == POINTS["kitebase"]
    assert report.double_kills == 1
    assert report.baseline.status == "done"
    assert report.baseline.decisions == 1  # the approval went through the store
    assert report.count("ok") == len(report.cases)
    assert report.store is not None
    assert report.store.startswith("postgresql://")
    # Without a root, every case's schema is dropped afterwards.
    assert _crash_schemas(pg_dsn) == before


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sleeps_child_runs_and_signals_survive_every_kill_on_postgres(pg_dsn: str) -> None:  # noqa: F811
    """Any worker may wake the sleeping run; the signal goes through the store."""
    check_waits(assert_crash_safe("examples.waits:scenario", min_points=12, store=pg_dsn))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_cli_runs_a_scenario_on_postgres(
    pg_dsn: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    points = "tool_returned,parked"
    assert (
        main(["crashtest", "examples.kitebase:scenario", "--store", pg_dsn, "--points", points])
        == 0
    )
    out = capsys.readouterr().out
    assert "on postgresql://" in out
    assert re.search(r"^p1 parked:1 +ok ", out, re.MULTILINE)
    assert re.search(r"^p2 tool_returned:1 +ok ", out, re.MULTILINE)
    assert "result: crash-safe" in out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_cli_catches_the_broken_tool_on_postgres(
    pg_dsn: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["crashtest", "examples.broken:scenario", "--store", pg_dsn, "--json"]
    assert main([*args, "--points", "tool_returned"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["store"].startswith("postgresql://")
    assert report["duplicates"] == 1
    assert report["lost_records"] == 0
    assert report["differing"] == 0
    [bad] = report["cases"]
    assert bad["kills"] == [{"process": 1, "point": "tool_returned", "n": 1}]
    assert bad["outcome"] == "duplicate"
    assert bad["ledger"] == {"transfer to GB33-0042": 2}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_root_keeps_the_cases_schemas(pg_dsn: str, tmp_path: pathlib.Path) -> None:  # noqa: F811
    before = _crash_schemas(pg_dsn)
    with pytest.raises(AssertionError) as info:
        assert_crash_safe(
            examples.broken.scenario, points=["tool_returned"], root=tmp_path, store=pg_dsn
        )
    assert "p1 tool_returned:1  duplicate" in str(info.value)
    baseline = (tmp_path / "baseline" / "schema.txt").read_text().strip()
    case = (tmp_path / "p1-tool_returned-1" / "schema.txt").read_text().strip()
    assert baseline.startswith("crash_")
    assert baseline.endswith("_0")
    assert case.endswith("_1")
    assert case.rpartition("_")[0] == baseline.rpartition("_")[0]
    assert _crash_schemas(pg_dsn) - before == {baseline, case}
    # The runs are in the kept schemas, not in files.
    assert not (tmp_path / "baseline" / "store").exists()
    assert _events(pg_dsn, baseline, "run-transfer") > 0
    assert _events(pg_dsn, case, "run-transfer") > _events(pg_dsn, baseline, "run-transfer")
    anyio.run(_drop, pg_dsn, [baseline, case])


async def _drop(dsn: str, schemas: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for schema in schemas:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        await conn.close()


def test_a_store_that_is_not_a_postgres_url_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CrashtestError, match="expected a postgresql:// URL"):
        run_crashtest("examples.broken:scenario", store=str(tmp_path))
    assert main(["crashtest", "examples.broken:scenario", "--store", str(tmp_path)]) == 2
    assert "expected a postgresql:// URL" in capsys.readouterr().err


def test_an_unreachable_database_is_reported_without_its_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("asyncpg")
    url = "postgresql://tether:s3cret@127.0.0.1:1/tether"
    assert main(["crashtest", "examples.broken:scenario", "--store", url]) == 2
    captured = capsys.readouterr()
    assert "cannot use the store postgresql://tether@127.0.0.1:1/tether" in captured.err
    assert "s3cret" not in captured.out + captured.err
