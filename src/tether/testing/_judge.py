"""Comparing one case with the baseline: the decision whether a kill did any harm.

- *duplicates*: side effects beyond the baseline's count, per ledger key;
- *lost records*: a journal record that was durable after a process ended (or that the killed
  process had acknowledged at its crash point) is missing or changed afterwards (``drive``
  finds those);
- *differs*: another final status, final answer, number of model answers in the journal, or a
  side effect missing;
- *extra model calls*: the model is asked again only for an answer a killed process got and
  had not saved: at most once per ``model_answered`` its trace shows without the
  ``model_saved`` that follows (a kill at ``model_answered``, or, with runs side by side in one
  process, such as a parent and its child run, a kill anywhere while another run's answer was
  on its way to the journal).

A run that stops as ``needs_attention`` because a kill left an ``escalate``-policy call with an
unknown outcome is the designed behaviour, not a failure, as long as nothing was duplicated: the
case's outcome is ``parked``. When the scenario's ``decide`` resolved such a call, the run has
to finish like the baseline; the outcome is ``resolved``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ._drive import UNREACHED, CaseRun, Kill
from ._report import CaseResult


def unsaved_answers(points: list[str]) -> int:
    """Model answers a process got and did not save, from the crash points it passed (each
    ``model_answered`` is followed by its run's ``model_saved`` unless the process died)."""
    return max(0, points.count("model_answered") - points.count("model_saved"))


@dataclass(frozen=True)
class Effects:
    """How a case's side effects (ledger keys and counts) differ from the baseline's."""

    repeated: dict[str, int]
    """Keys the baseline has, done more often here: each with the count here."""
    missing: dict[str, int]
    """Keys the baseline has, done less often here (or not at all): each with the count
    here."""
    unexpected: dict[str, int]
    """Keys the baseline does not have: each with the count here."""


def compare_ledgers(base: Counter[str], got: Counter[str]) -> Effects:
    """The keys whose counts differ between the baseline's ledger and a case's."""
    return Effects(
        repeated={k: n for k, n in got.items() if base[k] and n > base[k]},
        missing={k: got[k] for k, n in base.items() if got[k] < n},
        unexpected={k: n for k, n in got.items() if n and not base[k]},
    )


def _counts(keys: dict[str, int], base: Counter[str] | None = None) -> str:
    """``keys`` and their counts here (and the baseline's), in words."""
    return ", ".join(
        f"{k!r}: {n}" + ("" if base is None else f" (baseline {base[k]})")
        for k, n in sorted(keys.items())
    )


def judge(kills: tuple[Kill, ...], base: CaseRun, got: CaseRun) -> CaseResult:
    """Compare the case killed as ``kills`` say, which ended as ``got``, with the baseline.

    The outcome is the first failure that applies, in the order ``error`` (a process failed
    or was not killed as armed), ``duplicate``, ``lost``, ``differs``, ``extra-calls``; else
    ``unreached`` (a process ended before its kill point: the run took another path),
    ``parked``, ``resolved`` or ``ok``. A case that errored, parked or was not killed is not
    compared for its answer: it did not get as far. Every problem found is listed, not only
    the first.
    """
    effects = compare_ledgers(base.ledger, got.ledger)
    duplicates = sum(n - base.ledger[k] for k, n in effects.repeated.items())
    extra = got.model_calls - base.model_calls
    allowed = sum(unsaved_answers(p.points) for p in got.processes if p.killed)
    problems = list(got.problems)
    differs: list[str] = []
    unexpected = (
        [
            f"{sum(effects.unexpected.values())} side effect(s) the baseline did not have: "
            f"{_counts(effects.unexpected)}"
        ]
        if effects.unexpected
        else []
    )  # whatever became of the case: an effect the baseline never had is harm done
    if got.status not in ("error", UNREACHED) and not got.parked:
        if got.status != base.status:
            why = f" ({got.reason})" if got.reason else ""
            differs.append(f"status {got.status!r}{why}, baseline {base.status!r}")
        if got.final_text != base.final_text:
            differs.append(f"final answer {got.final_text!r}, baseline {base.final_text!r}")
        if got.recorded_model_calls != base.recorded_model_calls:
            differs.append(
                f"{got.recorded_model_calls} model answers in the journal, "
                f"baseline {base.recorded_model_calls}"
            )
        if effects.missing:
            differs.append(
                f"{sum(base.ledger[k] - n for k, n in effects.missing.items())} side "
                "effect(s) missing: "
                f"{_counts(effects.missing, base.ledger)}"
            )
        if extra < 0:
            differs.append(f"{-extra} model call(s) fewer than the baseline")
    if duplicates:
        problems.append(
            f"{duplicates} duplicate side effect(s): {_counts(effects.repeated, base.ledger)}"
        )
    problems += unexpected + differs
    too_many = got.status not in ("error", UNREACHED) and extra > allowed
    if too_many:
        problems.append(f"{extra} extra model call(s), at most {allowed} expected")
    if got.status == "error":
        outcome = "error"
    elif duplicates:
        outcome = "duplicate"
    elif got.lost:
        outcome = "lost"
    elif unexpected:
        outcome = "differs"
    elif got.status == UNREACHED:
        outcome = UNREACHED  # nothing was killed, so nothing to compare
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
