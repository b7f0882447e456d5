"""Each demo killed with SIGKILL at every crash point it passes, then resumed to the end.

For every crash point P and every occurrence n of P in every process of an uninterrupted run
(listed by ``TETHER_CRASH_TRACE``), the scenario runs again in fresh child processes with
``TETHER_CRASH_AT=P:n`` armed in that process. The armed process must die with ``SIGKILL``;
fresh processes then resume the run until it ends (for Kitebase, priya's approval is recorded
whenever the run waits for it). The end state must match the uninterrupted run:

- exactly one side effect (one reply, one email);
- the same final answer;
- the same number of model calls, except a kill at ``model_answered`` (the model answered, the
  answer was not saved yet), which costs exactly one extra call;
- the same number of model answers in the journal (the lost answer never appears in it).
"""

from __future__ import annotations

import os
import pathlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tether.demo import KITEBASE, MAIL, POINTS, Crash, Decide, Demo, DemoResult, drive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

APPROVE = Decide(call_id="toolu_03", approved=True, by="priya")

# The crash points each process of an uninterrupted run passes, and how often.
EXPECTED_POINTS: dict[str, list[dict[str, int]]] = {
    # Process 1 makes three model calls and runs two tools, then parks for approval; process 2
    # runs the approved reply and makes the last model call.
    "kitebase": [
        {
            "model_answered": 3,
            "model_saved": 3,
            "tool_started": 2,
            "tool_returned": 2,
            "result_saved": 2,
            "parked": 1,
        },
        {
            "model_answered": 1,
            "model_saved": 1,
            "tool_started": 1,
            "tool_returned": 1,
            "result_saved": 1,
        },
    ],
    # One process: four model calls, three tools.
    "mail": [
        {
            "model_answered": 4,
            "model_saved": 4,
            "tool_started": 3,
            "tool_returned": 3,
            "result_saved": 3,
        },
    ],
}

SCENARIOS: dict[str, tuple[Demo, Decide | None]] = {
    "kitebase": (KITEBASE, APPROVE),
    "mail": (MAIL, None),
}


def _cases(baseline: DemoResult) -> list[Crash]:
    return [
        Crash(process=p.number, point=point, n=n)
        for p in baseline.processes
        for point in POINTS
        for n in range(1, p.points.count(point) + 1)
    ]


def _problems(crash: Crash, baseline: DemoResult, got: DemoResult | BaseException) -> list[str]:
    if isinstance(got, BaseException):
        return [f"{type(got).__name__}: {got}"]
    extra = 1 if crash.point == "model_answered" else 0
    checks = {
        "status": (got.status, "done"),
        "side effects": (got.effects, 1),
        "final answer": (got.final_text, baseline.final_text),
        "model calls": (got.model_calls, baseline.model_calls + extra),
        "model answers in the journal": (got.recorded_model_calls, baseline.recorded_model_calls),
        "killed process's exit code": (got.processes[crash.process - 1].returncode, -9),
    }
    return [f"{what}: {a!r}, expected {b!r}" for what, (a, b) in checks.items() if a != b]


@pytest.mark.parametrize("demo", ["kitebase", "mail"])
def test_sigkill_at_every_crash_point(demo: str, tmp_path: pathlib.Path) -> None:
    scenario, decide = SCENARIOS[demo]
    baseline = drive(scenario, tmp_path / "baseline", decide=decide, trace=True)
    assert baseline.status == "done"
    assert baseline.effects == 1
    assert baseline.model_calls == baseline.recorded_model_calls == 4
    assert [dict(Counter(p.points)) for p in baseline.processes] == EXPECTED_POINTS[demo]

    cases = _cases(baseline)
    expected = EXPECTED_POINTS[demo]
    assert {c.point for c in cases} == {point for counts in expected for point in counts}
    assert len(cases) == sum(n for counts in expected for n in counts.values())

    def run(crash: Crash) -> DemoResult | BaseException:
        root = tmp_path / f"p{crash.process}-{crash.point}-{crash.n}"
        try:
            return drive(scenario, root, decide=decide, crash=crash)
        except Exception as exc:  # reported below with every other failing case
            return exc

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        outcomes = list(pool.map(run, cases))

    failures = [
        f"process {c.process} at {c.point}:{c.n}: " + "; ".join(problems)
        for c, got in zip(cases, outcomes, strict=True)
        if (problems := _problems(c, baseline, got))
    ]
    assert not failures, "\n".join(failures)
