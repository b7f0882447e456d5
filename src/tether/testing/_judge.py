"""Comparing one case with the baseline: the decision whether a kill did any harm.

- *duplicates*: side effects beyond the baseline's count, per ledger key;
- *lost records*: a journal record that was durable after a process ended (or that the killed
  process had acknowledged at its crash point) is missing or changed afterwards (``drive``
  finds those);
- *differs*: another final status, final answer, number of model answers in the journal, or a
  side effect missing;
- *extra model calls*: the model is asked again only when a kill falls between its answer and
  the save (``model_answered``), at most once per such kill.

A run that stops as ``needs_attention`` because a kill left an ``escalate``-policy call with an
unknown outcome is the designed behaviour, not a failure, as long as nothing was duplicated: the
case's outcome is ``parked``. When the scenario's ``decide`` resolved such a call, the run has
to finish like the baseline; the outcome is ``resolved``.
"""

from __future__ import annotations

from ._drive import CaseRun, Kill
from ._report import CaseResult


def judge(kills: tuple[Kill, ...], base: CaseRun, got: CaseRun) -> CaseResult:
    """Compare the case killed as ``kills`` say, which ended as ``got``, with the baseline.

    The outcome is the first failure that applies, in the order ``error`` (a process failed
    or was not killed as armed), ``duplicate``, ``lost``, ``differs``, ``extra-calls``; else
    ``parked``, ``resolved`` or ``ok``. A case that errored or parked is not compared for its
    answer: it did not get as far. Every problem found is listed, not only the first.
    """
    duplicates = sum(max(0, n - base.ledger[k]) for k, n in got.ledger.items())
    missing = sum(max(0, n - got.ledger[k]) for k, n in base.ledger.items())
    extra = got.model_calls - base.model_calls
    allowed = sum(1 for k in kills if k.point == "model_answered")
    problems = list(got.problems)
    differs: list[str] = []
    if got.status != "error" and not got.parked:
        if got.status != base.status:
            differs.append(f"status {got.status!r}, baseline {base.status!r}")
        if got.final_text != base.final_text:
            differs.append(f"final answer {got.final_text!r}, baseline {base.final_text!r}")
        if got.recorded_model_calls != base.recorded_model_calls:
            differs.append(
                f"{got.recorded_model_calls} model answers in the journal, "
                f"baseline {base.recorded_model_calls}"
            )
        if missing:
            differs.append(f"{missing} side effect(s) missing: {dict(got.ledger)}")
        if extra < 0:
            differs.append(f"{-extra} model call(s) fewer than the baseline")
    if duplicates:
        problems.append(f"{duplicates} duplicate side effect(s): {dict(got.ledger)}")
    problems += differs
    too_many = got.status != "error" and extra > allowed
    if too_many:
        problems.append(f"{extra} extra model call(s), at most {allowed} expected")
    if got.status == "error":
        outcome = "error"
    elif duplicates:
        outcome = "duplicate"
    elif got.lost:
        outcome = "lost"
    elif differs:
        outcome = "differs"
    elif too_many:
        outcome = "extra-calls"
    elif got.parked:
        outcome = "parked"
    elif got.escalations:
        outcome = "resolved"
    else:
        outcome = "ok"
    return CaseResult(
        kills=kills,
        outcome=outcome,
        status=got.status,
        final_text=got.final_text,
        extra_model_calls=extra,
        duplicates=duplicates,
        lost_records=got.lost,
        ledger=dict(got.ledger),
        processes=[p.returncode for p in got.processes],
        problems=problems,
    )
