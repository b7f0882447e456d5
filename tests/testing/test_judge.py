"""How a case's side effects are compared with the baseline's: each key that differs is named
with both counts, and only a key the baseline has, done more often, is a duplicate."""

from __future__ import annotations

import dataclasses
from collections import Counter

from tether.testing._drive import CaseRun, Kill
from tether.testing._judge import judge

BASE = CaseRun(
    processes=[],
    status="done",
    reason="",
    final_text="charged",
    ledger=Counter({"charge A": 1, "mail A": 1}),
    model_calls=3,
    recorded_model_calls=3,
    events=9,
    escalations=0,
    parked=False,
    decisions=0,
    signals=0,
    problems=[],
    lost=0,
)
KILLS = (Kill(1, "tool_returned", 1),)


def test_a_key_done_twice_is_a_duplicate_named_with_both_counts() -> None:
    got = dataclasses.replace(BASE, ledger=Counter({"charge A": 2, "mail A": 1}))
    result = judge(KILLS, BASE, got)
    assert (result.outcome, result.duplicates) == ("duplicate", 1)
    assert result.problems == ["1 duplicate side effect(s): 'charge A': 2 (baseline 1)"]


def test_another_key_than_the_baseline_s_differs_and_is_no_duplicate() -> None:
    """A model that chose another argument after the kill: the baseline's effect is missing
    and the new one is unexpected, each named; nothing is counted twice."""
    got = dataclasses.replace(
        BASE,
        status="needs_attention",
        reason="the model's parameters changed",
        ledger=Counter({"charge B": 1, "mail A": 1}),
    )
    result = judge(KILLS, BASE, got)
    assert (result.outcome, result.duplicates) == ("differs", 0)
    assert result.problems == [
        "1 side effect(s) the baseline did not have: 'charge B': 1",
        "status 'needs_attention' (the model's parameters changed), baseline 'done'",
        "1 side effect(s) missing: 'charge A': 0 (baseline 1)",
    ]


def test_the_same_effects_are_ok() -> None:
    assert judge(KILLS, BASE, dataclasses.replace(BASE)).outcome == "ok"


def test_an_effect_the_baseline_never_had_fails_a_case_that_took_another_path() -> None:
    """Not killed where armed (its run took another path), the case still did something the
    baseline never did: that is harm, not an untested point."""
    from tether.testing._drive import UNREACHED

    got = dataclasses.replace(
        BASE, status=UNREACHED, ledger=Counter({"charge A": 1, "mail A": 1, "refund A": 1})
    )
    result = judge(KILLS, BASE, got)
    assert result.outcome == "differs"
    assert result.problems == ["1 side effect(s) the baseline did not have: 'refund A': 1"]
