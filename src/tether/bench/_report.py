"""What a journal benchmark run found: medians, ratios, the machine, as tables or JSON.

The JSON object (``Report.to_json``) has four keys: ``machine`` (``machine_info``),
``settings`` (``quick``, ``duration_s``, ``warmup_s``, ``repeats``, ``cases``, ``elapsed_s``),
``results`` (per case: ``key``, the case's fields, ``records_per_s`` and ``mb_per_s`` of the
median repeat, and every repeat's ``rates``) and ``ratios`` (``name``, ``numerator`` and
``denominator`` keys, ``value`` (of the medians), ``paired_median`` (the median of each
repeat's own ratio: its two sides ran close together in time), ``target``, ``met``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from ._cases import Case, Ratio


@dataclass
class Result:
    """Every repeat of one case (records per second), summarized by their median."""

    case: Case
    rates: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def mb_per_s(self) -> float:
        """Record bytes per second, in MB (10**6 bytes); framing is not counted."""
        return self.records_per_s * self.case.record_size / 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.case.key,
            **asdict(self.case),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
            "rates": [round(r, 1) for r in self.rates],
        }


@dataclass
class Report:
    """One run of the benchmark: each case's result, the ratios between them, where it ran."""

    results: dict[Case, Result]
    ratios: list[Ratio]
    machine: dict[str, Any]
    settings: dict[str, Any]

    def value(self, ratio: Ratio) -> float:
        """The ratio of the two cases' medians (0 when the denominator measured nothing)."""
        den = self.results[ratio.denominator].records_per_s
        return self.results[ratio.numerator].records_per_s / den if den else 0.0

    def paired(self, ratio: Ratio) -> float:
        """The median of the per-repeat ratios: each pair ran close together in time."""
        num, den = self.results[ratio.numerator].rates, self.results[ratio.denominator].rates
        return statistics.median(n / d if d else 0.0 for n, d in zip(num, den, strict=True))

    def met(self, ratio: Ratio) -> bool | None:
        """Whether the ratio reaches its target (``None`` for a ratio without one)."""
        return None if ratio.target is None else self.value(ratio) >= ratio.target

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON-ready object (its shape: this module's docstring)."""
        return {
            "machine": self.machine,
            "settings": self.settings,
            "results": [r.to_json() for r in self.results.values()],
            "ratios": [
                {
                    "name": q.name,
                    "numerator": q.numerator.key,
                    "denominator": q.denominator.key,
                    "value": round(self.value(q), 3),
                    "paired_median": round(self.paired(q), 3),
                    "target": q.target,
                    "met": self.met(q),
                }
                for q in self.ratios
            ],
        }

    def results_table(self) -> str:
        """One line per case: median records/s and MB/s, and the spread of the repeats."""
        lines = [f"{'case':<36} {'records/s':>11} {'MB/s':>9} {'min..max rec/s':>20}"]
        for r in self.results.values():
            spread = f"{min(r.rates):.0f}..{max(r.rates):.0f}" if r.rates else "-"
            lines.append(
                f"{r.case.key:<36} {r.records_per_s:>11.0f} {r.mb_per_s:>9.2f} {spread:>20}"
            )
        return "\n".join(lines)

    def ratios_table(self) -> str:
        """One line per ratio: of the medians, paired, the target and whether it was met."""
        lines = [f"{'ratio (of medians)':<52} {'value':>7} {'paired':>7} {'target':>8}  status"]
        for q in self.ratios:
            met = self.met(q)
            target = f">={q.target:.1f}x" if q.target is not None else ""
            status = "" if met is None else ("met" if met else "MISSED")
            value, paired = self.value(q), self.paired(q)
            lines.append(f"{q.name:<52} {value:>6.2f}x {paired:>6.2f}x {target:>8}  {status}")
        return "\n".join(lines)

    def where(self) -> str:
        """The filesystem and device the run measured, and how long it took."""
        m = self.machine
        return (
            f"{self.settings['elapsed_s']:.1f} s; filesystem {m['filesystem']} on {m['device']} "
            f"(mounted at {m['mount_point']}), {m['cpu_count']} CPUs, {m['platform']}"
        )
