"""What a crash test found: one ``CaseResult`` per case, the ``Baseline``, and the ``Report``.

``Report.text()`` (the table and the summary) is what ``tether crashtest`` prints and what
``assert_crash_safe`` raises with; ``Report.as_dict()`` is its ``--json`` output.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ._drive import Kill

FAILURES = ("error", "duplicate", "lost", "differs", "extra-calls")
"""The outcomes of a case that make a crash test fail."""


@dataclass
class CaseResult:
    """One crash case: where its processes were killed and how the run ended compared with
    the baseline.

    Attributes:
        kills: the kills, in order (two with ``double``).
        outcome: ``ok`` (ended as the baseline did), ``resolved`` (a call escalated after the
            kill was resolved by the scenario's ``decide`` and the run ended as the baseline
            did), ``parked`` (an escalated call left the run ``needs_attention``, nothing was
            duplicated), ``unreached`` (in every try a process ended cleanly before its kill
            point: the run's path depends on timing there, and the point went untested), or a
            failure: ``error`` (a process failed or was not killed as armed),
            ``duplicate``, ``lost``, ``differs``, ``extra-calls``.
        extra_model_calls: model calls beyond the baseline's.
        duplicates: side effects beyond the baseline's count, summed over the ledger's keys.
        lost_records: durable journal records that went missing or changed.
        problems: what went wrong, one line each.
    """

    kills: tuple[Kill, ...]
    outcome: str
    status: str
    final_text: str | None
    extra_model_calls: int
    duplicates: int
    lost_records: int
    ledger: dict[str, int]
    processes: list[int]
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    @property
    def label(self) -> str:
        return " then ".join(str(k) for k in self.kills)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kills": [{"process": k.process, "point": k.point, "n": k.n} for k in self.kills],
            "outcome": self.outcome,
            "status": self.status,
            "final_text": self.final_text,
            "extra_model_calls": self.extra_model_calls,
            "duplicates": self.duplicates,
            "lost_records": self.lost_records,
            "ledger": self.ledger,
            "processes": self.processes,
            "problems": self.problems,
        }


@dataclass
class Baseline:
    """The uninterrupted run every case is compared with."""

    status: str
    final_text: str | None
    ledger: dict[str, int]
    model_calls: int
    processes: int
    decisions: int
    points: list[list[str]]  # the crash points each process passed, in order
    signals: int = 0  # events the scenario delivered
    deployed: int | None = None  # the first process that ran the scenario's deployed app
    repins: int = 0  # runs parked for their contract that the scenario's repin answered


@dataclass
class Report:
    """What ``run_crashtest`` found. ``ok`` is what a test asserts."""

    target: str
    baseline: Baseline
    cases: list[CaseResult]
    seconds: float
    store: str | None = None  # the PostgreSQL database the runs lived in (no password)

    @property
    def points(self) -> int:
        """Crash points exercised: cases with one kill that was reached."""
        return sum(1 for c in self.cases if len(c.kills) == 1 and c.outcome != "unreached")

    @property
    def double_kills(self) -> int:
        return sum(1 for c in self.cases if len(c.kills) > 1 and c.outcome != "unreached")

    @property
    def duplicates(self) -> int:
        return sum(c.duplicates for c in self.cases)

    @property
    def lost_records(self) -> int:
        return sum(c.lost_records for c in self.cases)

    @property
    def differing(self) -> int:
        """Cases whose run ended otherwise than the baseline (status, answer, effects)."""
        return sum(1 for c in self.cases if c.outcome == "differs")

    @property
    def errors(self) -> int:
        return sum(1 for c in self.cases if c.outcome == "error")

    @property
    def extra_model_calls(self) -> int:
        return sum(max(0, c.extra_model_calls) for c in self.cases)

    @property
    def extra_calls_elsewhere(self) -> int:
        """Cases with extra model calls not explained by a kill between an answer and its save
        (should be 0)."""
        return sum(1 for c in self.cases if c.outcome == "extra-calls")

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)

    @property
    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if c.failed]

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self) -> str:
        """One line per case: kill, outcome, extra model calls, duplicates, problems."""
        width = max([len("kill"), *(len(c.label) for c in self.cases)])
        lines = [f"{'kill':<{width}}  {'outcome':<11}  extra calls  duplicates  notes"]
        for c in self.cases:
            note = "; ".join(c.problems)
            if not note and c.outcome == "parked":
                note = "needs_attention: an escalated call is left for a person"
            elif not note and c.outcome == "resolved":
                note = "escalated, then resolved by the scenario's decide()"
            lines.append(
                f"{c.label:<{width}}  {c.outcome:<11}  {c.extra_model_calls:>11}  "
                f"{c.duplicates:>10}  {note}".rstrip()
            )
        return "\n".join(lines)

    def summary(self) -> str:
        b = self.baseline
        effects = ", ".join(f"{k} x{v}" for k, v in sorted(b.ledger.items())) or "none"
        outcomes = ", ".join(
            f"{self.count(o)} {o}"
            for o in ("ok", "resolved", "parked", "unreached", *FAILURES)
            if self.count(o) or o in ("ok", "duplicate", "lost", "differs")
        )
        double = f" + {self.double_kills} double kills" if self.double_kills else ""
        return "\n".join(
            [
                f"baseline: {b.status} in {b.processes} process(es), {b.model_calls} model calls, "
                f"{b.decisions} decision(s)"
                + (f", {b.signals} signal(s)" if b.signals else "")
                + (f", deployed before process {b.deployed}" if b.deployed is not None else "")
                + (f", {b.repins} repin(s)" if b.repins else "")
                + f"; side effects: {effects}",
                f"crash points exercised: {self.points}{double} in {self.seconds:.1f} s",
                f"outcomes: {outcomes}",
                f"duplicates: {self.duplicates}  lost records: {self.lost_records}  "
                f"differing final answers: {self.differing}  extra model calls: "
                f"{self.extra_model_calls} (unexplained: {self.extra_calls_elsewhere})",
                "result: " + ("crash-safe" if self.ok else f"NOT crash-safe ({self._why()})"),
            ]
        )

    def _why(self) -> str:
        counts = Counter(c.outcome for c in self.failures)
        return ", ".join(f"{n} {o}" for o, n in counts.items())

    def text(self) -> str:
        where = f" on {self.store}" if self.store else ""
        return f"crashtest {self.target}{where}\n\n{self.table()}\n\n{self.summary()}"

    def as_dict(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "target": self.target,
            "store": self.store,
            "ok": self.ok,
            "points": self.points,
            "double_kills": self.double_kills,
            "duplicates": self.duplicates,
            "lost_records": self.lost_records,
            "differing": self.differing,
            "errors": self.errors,
            "extra_model_calls": self.extra_model_calls,
            "extra_calls_elsewhere": self.extra_calls_elsewhere,
            "seconds": round(self.seconds, 3),
            "baseline": {
                "status": b.status,
                "final_text": b.final_text,
                "ledger": b.ledger,
                "model_calls": b.model_calls,
                "processes": b.processes,
                "decisions": b.decisions,
                "signals": b.signals,
                "deployed": b.deployed,
                "repins": b.repins,
                "points": b.points,
            },
            "cases": [c.as_dict() for c in self.cases],
        }
