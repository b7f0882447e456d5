"""Crash points around a deploy and a repin, under ``tether crashtest``, on files and PostgreSQL.

``examples/refund_deploy.py`` deploys a ``refund`` tool with a new parameter while its run is
parked for an approval, pinned to version 1. In ``scenario`` the new parameter is required:
the next worker parks the run for its contract and the scenario's person repins it (the
record ``tether repin`` writes); in ``compatible`` it is optional and declared compatible,
and the worker takes it over itself. Each run is killed at the crash points of the processes
that run the deployed application (``after_deploy``): the contract park, the takeover's
``repinned`` record (``contract_taken``), and every tool start, side effect and model answer
from the repin on, up to the last model call.

Beside the harness's own verdict (no side effect twice, no record lost, the baseline's answer),
every case's journal is read back with the implementations' own log of their runs: version 1
of ``refund`` never ran after the run's ``repinned`` record, version 2 never before it, and
the run finished pinned to version 2.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable

import anyio
import msgspec
import pytest

import examples.refund_deploy
from examples.refund_deploy import RUN_ID, Services
from tether import operate
from tether.journal import AnyEvent, FileStore, Parked, Repinned, ToolStarted, verify_file
from tether.models import Model
from tether.supervisor import RunStatus, Supervisor, fold
from tether.testing import CrashtestError, Report, Scenario, assert_crash_safe, run_crashtest
from tether.testing._drive import stranded
from tether.testing._scenario import check_scenario
from tether.tools import ToolRegistry

from ..postgres.conftest import pg_dsn, pg_server  # noqa: F401
from .test_crashtest_postgres import _drop

POINTS = ("parked", "contract_taken", "tool_started", "tool_returned", "model_answered")
"""The contract park, the takeover, and each call and model answer after the deploy."""

SCENARIOS = {
    # p2 parks for the contract; after the repin p3 runs the email, asks the model (shown
    # refund v2), runs refund v2 and asks the model again.
    "scenario": ["p2 parked:1"]
    + [
        f"p3 {point}:{n}"
        for point in ("tool_started", "tool_returned", "model_answered")
        for n in (1, 2)
    ],
    # p2 takes the compatible change over, then does the same.
    "compatible": ["p2 contract_taken:1"]
    + [
        f"p2 {point}:{n}"
        for point in ("tool_started", "tool_returned", "model_answered")
        for n in (1, 2)
    ],
}

Reader = Callable[[pathlib.Path], list[AnyEvent]]


def from_files(case: pathlib.Path) -> list[AnyEvent]:
    return list(verify_file(FileStore(case / "store").location(RUN_ID)).events)


def check_contracts(report: Report, root: pathlib.Path, read: Reader, *, person: bool) -> None:
    """Every case (and the baseline): each run of a ``refund`` implementation was on the
    contract the journal says the run had accepted when that attempt started."""
    names = [
        "baseline",
        *("-".join(f"p{k.process}-{k.point}-{k.n}" for k in c.kills) for c in report.cases),
    ]
    for name in names:
        events = read(root / name)
        [repin] = [e for e in events if isinstance(e, Repinned)]
        assert repin.by == ("crashtest" if person else "")
        parks = [e for e in events if isinstance(e, Parked) and e.cause == "contract"]
        assert len(parks) == (1 if person else 0), name
        assert all(p.seq < repin.seq for p in parks)
        started = {(e.call_id, e.attempt): e.seq for e in events if isinstance(e, ToolStarted)}
        attempts = Services(root / name / "world").attempts()
        assert {a["implementation"] for a in attempts} == {"v1", "v2"}, name
        for attempt in attempts:
            seq = started[(attempt["call_id"], attempt["attempt"])]
            if attempt["implementation"] == "v1":
                assert seq < repin.seq, f"{name}: refund v1 ran after the repin: {attempt}"
            else:
                assert seq > repin.seq, f"{name}: refund v2 ran before the repin: {attempt}"
        state = fold(events)
        assert state.finished is not None, name
        assert state.finished.status == "done", name
        [pin] = [p for p in state.manifest.tools if p.name == "refund"]
        assert pin == repin.tools[0]
        assert "reason" in (pin.input_schema or {}).get("properties", {})
        assert pin.version == ("2" if person else "1")


def check_report(report: Report, target: str) -> None:
    assert sorted(c.label for c in report.cases) == sorted(SCENARIOS[target])
    assert report.count("ok") == len(report.cases), report.text()
    assert report.duplicates == 0
    assert report.lost_records == 0
    assert report.baseline.deployed == 2
    assert report.baseline.repins == (1 if target == "scenario" else 0)
    assert report.baseline.ledger == {
        "refund o-7 20 (v1)": 1,
        "email o-7": 1,
        "refund o-7 5 for late delivery (v2)": 1,
    }


def crash_test(target: str, root: pathlib.Path, store: str | None = None) -> Report:
    """The scenario killed at ``POINTS`` from its deploy on, its cases kept under ``root``."""
    report = assert_crash_safe(
        f"examples.refund_deploy:{target}",
        points=POINTS,
        after_deploy=True,
        min_points=len(SCENARIOS[target]),
        root=root,
        store=store,
    )
    check_report(report, target)
    return report


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", sorted(SCENARIOS))
def test_a_deploy_and_its_repin_are_crash_safe_on_files(
    target: str, tmp_path: pathlib.Path
) -> None:
    report = crash_test(target, tmp_path)
    check_contracts(report, tmp_path, from_files, person=target == "scenario")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", sorted(SCENARIOS))
def test_a_deploy_and_its_repin_are_crash_safe_on_postgres(
    target: str,
    tmp_path: pathlib.Path,
    pg_dsn: str,  # noqa: F811
) -> None:
    def from_postgres(case: pathlib.Path) -> list[AnyEvent]:
        return anyio.run(_read, pg_dsn, (case / "schema.txt").read_text().strip())

    try:
        report = crash_test(target, tmp_path, pg_dsn)
        check_contracts(report, tmp_path, from_postgres, person=target == "scenario")
    finally:  # a root keeps the cases' schemas
        anyio.run(_drop, pg_dsn, [p.read_text().strip() for p in tmp_path.glob("*/schema.txt")])


async def _read(dsn: str, schema: str) -> list[AnyEvent]:
    from tether.postgres import PostgresStore

    async with PostgresStore(dsn, schema=schema) as store:
        return await store.read(RUN_ID)


async def test_a_contract_park_is_answered_with_the_record_tether_repin_writes(
    tmp_path: pathlib.Path,
) -> None:
    """What the scenario's person records is ``tether.operate.repin``'s record, pinning what
    a worker of the deployed application advertises; checked, it lets the run finish."""
    scenario = examples.refund_deploy.scenario(tmp_path)
    store = FileStore(tmp_path / "store")
    model, tools = scenario.build()
    async with Supervisor(store, model=model, tools=tools) as sup:
        await sup.start(RUN_ID, scenario.prompt)
        assert await sup.wait(RUN_ID) is RunStatus.WAITING_FOR_APPROVAL
        [call] = (await sup.inspect(RUN_ID)).pending
        await sup.decide(RUN_ID, call, approved=True, by="priya")
    assert scenario.deploy is not None
    scenario.deploy()
    model, tools = scenario.build()
    async with Supervisor(store, model=model, tools=tools) as sup:  # resumes it on entry
        assert await sup.wait(RUN_ID) is RunStatus.NEEDS_ATTENTION
    async with store:
        contract = stranded(RUN_ID, await store.read(RUN_ID), scenario)
        assert contract is not None
        assert "pinned tool 'refund' version '1' is not registered" in contract.reason
        assert contract.tools == (tools.get("refund").pin(),)
        assert contract.model is None
        answer = scenario.repin(contract)
        assert answer is not None
        done = await operate.repin(
            store, RUN_ID, tools=contract.tools, by=answer.by, note=answer.note
        )
    assert msgspec.structs.replace(done.record, seq=-1, at=0.0) == answer
    async with Supervisor(store, model=model, tools=tools) as sup:
        assert await sup.wait(RUN_ID) is RunStatus.DONE
    assert Services(tmp_path).effects()["refund o-7 5 for late delivery (v2)"] == 1


def test_a_run_on_its_contract_is_not_stranded(tmp_path: pathlib.Path) -> None:
    scenario = examples.refund_deploy.scenario(tmp_path)
    assert stranded(RUN_ID, [], scenario) is None


def _deploy_raises(root: pathlib.Path) -> Scenario:
    def deploy() -> None:
        raise OSError("no space left for the new version")

    return dataclasses.replace(examples.refund_deploy.scenario(root), deploy=deploy)


def _deploy_breaks_build(root: pathlib.Path) -> Scenario:
    def build() -> tuple[Model, ToolRegistry]:
        if (root / "version").exists():
            raise ImportError("the new version does not import")
        return examples.refund_deploy.scenario(root).build()

    return dataclasses.replace(examples.refund_deploy.scenario(root), build=build)


def test_a_deploy_that_fails_is_the_scenario_s_fault_not_the_agent_s() -> None:
    with pytest.raises(CrashtestError, match="deploy\\(\\) raised OSError: no space left"):
        check_scenario("t:_deploy_raises", _deploy_raises)
    with pytest.raises(
        CrashtestError, match="build\\(\\) after its deploy\\(\\) raised ImportError"
    ):
        check_scenario("t:_deploy_breaks_build", _deploy_breaks_build)


def test_after_deploy_needs_a_scenario_that_deploys() -> None:
    with pytest.raises(CrashtestError, match=r"after_deploy: the scenario .* has no deploy"):
        run_crashtest("examples.kitebase:scenario", after_deploy=True)
