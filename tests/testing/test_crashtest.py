"""``run_crashtest`` and ``tether crashtest`` on the shipped example scenarios.

Each shipped scenario is killed at every crash point it passes (and a few cases twice) and must
come out as an uninterrupted run did: no duplicate side effect, no lost journal record, the
same final answer, and an extra model call only after a kill at ``model_answered``. The broken
example, whose ``idempotency_key`` tool ignores the key, must be caught.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import examples.broken
from tether.cli import main
from tether.journal import Decision, Resolved
from tether.testing import (
    CrashtestError,
    Pending,
    Report,
    Scenario,
    approve_all,
    assert_crash_safe,
    run_crashtest,
)

SHIPPED = ["kitebase", "mail", "all_policies", "openai_agent"]
POINTS = {"kitebase": 18, "mail": 17, "all_policies": 28, "openai_agent": 22}
"""The crash points each shipped scenario passes in an uninterrupted run: one case each."""


def _check_safe(report: Report, *, one_run: bool = True) -> None:
    assert report.ok, report.text()
    assert report.duplicates == 0
    assert report.lost_records == 0
    assert report.differing == 0
    assert report.errors == 0
    assert report.extra_calls_elsewhere == 0
    for case in report.cases:
        if case.outcome == "parked":  # stopped early, waiting for a person: fewer calls
            assert case.extra_model_calls <= 0, case
            continue
        if not one_run:  # another run of the process may have been between answer and save
            assert case.extra_model_calls >= 0, case
            continue
        at_answer = sum(1 for k in case.kills if k.point == "model_answered")
        assert 0 <= case.extra_model_calls <= at_answer, case


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_survives_a_kill_at_every_point(name: str) -> None:
    # The demo scenarios are killed twice in one case; all_policies, the longest, in two.
    double = 2 if name == "all_policies" else 1
    report = assert_crash_safe(f"examples.{name}:scenario", double=double, min_points=12)
    _check_safe(report)
    assert report.points == POINTS[name]
    assert report.double_kills == double
    assert report.baseline.status == "done"
    assert {k.point for c in report.cases for k in c.kills} >= {
        "model_answered",
        "model_saved",
        "tool_started",
        "tool_returned",
        "result_saved",
    }
    if name == "openai_agent":
        # Each refund has a key of its own although the server called both call_0.
        assert report.baseline.ledger == {"refund A-1": 1, "refund A-2": 1}
    if name == "all_policies":
        # A kill inside notify_warehouse (policy escalate) parks the run; decide() looks the
        # call up in the shop and resolves it, and the run ends as the baseline did.
        assert report.count("resolved") >= 2
        assert report.baseline.ledger == {
            "charge A-1001": 1,
            "shipment A-1001": 1,
            "warehouse-note A-1001": 1,
            "receipt A-1001": 1,
        }


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_unresolved_escalation_parks_without_duplicates() -> None:
    report = run_crashtest("examples.all_policies:scenario_unresolved", points=["tool_returned"])
    _check_safe(report)
    parked = [c for c in report.cases if c.outcome == "parked"]
    assert [str(c.kills[0]) for c in parked] == ["p1 tool_returned:4"]
    assert all(c.status == "needs_attention" and c.duplicates == 0 for c in parked)
    assert report.count("ok") == len(report.cases) - 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_cli_catches_a_tool_that_ignores_its_idempotency_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["crashtest", "examples.broken:scenario", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["points"] == 7
    assert report["duplicates"] == 1
    assert report["lost_records"] == 0
    assert report["differing"] == 0
    [bad] = [c for c in report["cases"] if c["outcome"] != "ok"]
    assert bad["kills"] == [{"process": 1, "point": "tool_returned", "n": 1}]
    assert bad["outcome"] == "duplicate"
    assert bad["ledger"] == {"transfer to GB33-0042": 2}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_assert_crash_safe_raises_with_the_table(tmp_path: pathlib.Path) -> None:
    with pytest.raises(AssertionError) as info:
        assert_crash_safe(examples.broken.scenario, points=["tool_returned"], root=tmp_path)
    text = str(info.value)
    assert "p1 tool_returned:1  duplicate" in text
    assert "NOT crash-safe (1 duplicate)" in text
    # The cases' directories are kept under the given root.
    assert (tmp_path / "baseline" / "store" / "runs").is_dir()
    assert (tmp_path / "p1-tool_returned-1" / "trace-2.txt").exists()


def test_assert_crash_safe_says_when_too_few_points_were_exercised() -> None:
    with pytest.raises(AssertionError, match=r"only 1 crash point\(s\) exercised, min_points=2"):
        assert_crash_safe("examples.broken:scenario", points=["result_saved"], min_points=2)


def test_the_cli_prints_a_table_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crashtest", "examples.broken:scenario", "--points", "result_saved"]) == 0
    out = capsys.readouterr().out
    assert "p1 result_saved:1  ok" in out
    assert "crash points exercised: 1" in out
    assert "result: crash-safe" in out


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("examples.broken", "expected MODULE:SCENARIO"),
        ("examples.nope:scenario", "cannot import"),
        ("examples.broken:nope", "has no 'nope'"),
        ("examples.broken:ORDER", "has no"),
    ],
)
def test_a_bad_target_is_refused(
    target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["crashtest", target]) == 2
    assert message in capsys.readouterr().err


def test_unknown_points_and_local_factories_are_refused() -> None:
    with pytest.raises(CrashtestError, match="unknown crash points"):
        run_crashtest("examples.broken:scenario", points=["tool_ran"])

    def local(root: pathlib.Path) -> Scenario:
        return examples.broken.scenario(root)

    with pytest.raises(CrashtestError, match="cannot be imported by a child"):
        run_crashtest(local)


def test_pending_builds_the_records_a_person_would() -> None:
    p = Pending(run_id="r", call_id="toolu_01", name="pay", input={}, escalated=True)
    assert p.approve(by="ann") == Decision(call_id="toolu_01", approved=True, by="ann")
    assert p.reject("no", by="ann") == Decision(
        call_id="toolu_01", approved=False, by="ann", note="no"
    )
    assert p.succeeded({"id": 1}).result == {"id": 1}
    assert isinstance(p.retry(), Resolved)
    assert p.retry().outcome == "retry"
    assert p.failed("gone").outcome == "failed"
    assert approve_all(p) is None
    waiting = Pending(run_id="r", call_id="toolu_02", name="pay", input={}, escalated=False)
    assert approve_all(waiting) == waiting.approve()


def test_a_point_a_case_never_reaches_is_reported_untested_not_failed(
    tmp_path: pathlib.Path,
) -> None:
    """Which of two runs parks first can depend on timing, so a case may end cleanly before the
    n-th pass of its point. It is tried again, then reported ``unreached``: not a failure, and
    not counted as exercised."""
    report = run_crashtest(
        "tests.testing._path_scenarios:parks_only_in_the_baseline",
        points=["parked"],
        root=tmp_path,
    )
    (case,) = report.cases
    assert case.outcome == "unreached", report.text()
    assert case.problems == ["process 1 (start) ended without reaching p1 parked:1"]
    assert report.ok
    assert report.points == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "baseline",
        "p1-parked-1",
        "p1-parked-1-try2",
        "p1-parked-1-try3",
    ]
    assert "1 unreached" in report.summary()


WAITS_LEDGER = {"refund o-1": 1, "email o-1": 1}


def check_waits(report: Report) -> None:
    """The waiting example: every kill comes out as the baseline, whichever run was at the
    point (the lead run, or its child the researcher), across a sleep and a signal."""
    _check_safe(report, one_run=False)
    assert report.count("ok") + report.count("unreached") == len(report.cases), report.text()
    assert report.points >= 30, report.text()  # both runs' points, around every wait
    assert report.baseline.status == "done"
    assert report.baseline.signals == 1  # the customer's reply, delivered by the scenario
    assert report.baseline.ledger == WAITS_LEDGER
    assert {k.point for c in report.cases for k in c.kills} >= {"parked", "result_saved"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_that_sleeps_waits_on_a_child_and_on_a_signal_survives_every_kill() -> None:
    check_waits(assert_crash_safe("examples.waits:scenario", double=1, min_points=12))
