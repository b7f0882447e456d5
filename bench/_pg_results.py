"""What the PostgreSQL store bench measured: its cases, samples, medians and ratios.

A ``Result`` holds every sample of one case on one variant (``file``: ``FileStore``;
``postgres``: ``PostgresStore``; ``pg-async``: the same on a database with
``synchronous_commit = off``). Ratios are of PostgreSQL to the file store: of the medians, and
``paired``, the median of each repeat's own ratio (the two measured back to back).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["append", "steps", "workers"]
Variant = Literal["file", "postgres", "pg-async"]
VARIANTS: tuple[Variant, ...] = ("file", "postgres", "pg-async")
UNITS: dict[Kind, str] = {"append": "appends/s", "steps": "steps/s", "workers": "steps/s"}


@dataclass(frozen=True)
class Case:
    """``n`` is the number of runs at once (append, steps) or of worker processes."""

    kind: Kind
    n: int

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.n}"

    @property
    def label(self) -> str:
        if self.kind == "append":
            return f"append 1 KiB, {self.n} run{'s' if self.n > 1 else ''}"
        if self.kind == "steps":
            return f"steps, {self.n} run{'s' if self.n > 1 else ''} at once"
        return f"workers, {self.n} process{'es' if self.n > 1 else ''}"

    @property
    def variants(self) -> tuple[Variant, ...]:
        return ("file", "postgres") if self.kind == "workers" else ("file", "postgres", "pg-async")


@dataclass(frozen=True)
class Settings:
    repeats: int
    warmup: float
    append_window: float
    steps_window: float
    worker_runs: int


@dataclass
class Sample:
    """One measurement: ``ops`` counted in ``seconds``, and what they cost.

    ``client_cpu`` and ``server_cpu`` cover the counted window; ``xacts`` and ``wal_syncs``
    (PostgreSQL only) the whole sample, whose operations are ``all_ops``.
    """

    ops: int
    seconds: float
    repeat: int = 0
    all_ops: int = 0
    client_cpu: float = 0.0
    server_cpu: float | None = None
    xacts: int | None = None
    wal_syncs: int | None = None
    wal_sync_ms: float | None = None
    wal_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Result:
    case: Case
    variant: Variant
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return statistics.median(s.rate for s in self.samples) if self.samples else None

    def _per_op(self, name: str, ops: Callable[[Sample], int]) -> float | None:
        values = [(getattr(s, name), ops(s)) for s in self.samples]
        if not values or any(v is None for v, _ in values):
            return None
        total = sum(n for _, n in values)
        return sum(v for v, _ in values) / total if total else None

    def per_op(self) -> dict[str, float | None]:
        return {
            "client_cpu_ms": _scaled(self._per_op("client_cpu", lambda s: s.ops), 1000),
            "server_cpu_ms": _scaled(self._per_op("server_cpu", lambda s: s.ops), 1000),
            "xacts": self._per_op("xacts", lambda s: s.all_ops),
            "wal_syncs": self._per_op("wal_syncs", lambda s: s.all_ops),
            "wal_bytes": self._per_op("wal_bytes", lambda s: s.all_ops),
            "ms_per_wal_sync": self._per_sync(),
        }

    def _per_sync(self) -> float | None:
        syncs = sum(s.wal_syncs or 0 for s in self.samples)
        if not syncs:
            return None
        return sum(s.wal_sync_ms or 0.0 for s in self.samples) / syncs

    def to_json(self) -> dict[str, Any]:
        rate = self.rate
        return {
            "rate": None if rate is None else round(rate, 1),
            "rates": [round(s.rate, 1) for s in self.samples],
            "per_op": {k: None if v is None else round(v, 4) for k, v in self.per_op().items()},
            "samples": [
                {
                    "ops": s.ops,
                    "seconds": round(s.seconds, 3),
                    "repeat": s.repeat,
                    "all_ops": s.all_ops,
                    "client_cpu_s": round(s.client_cpu, 3),
                    "server_cpu_s": None if s.server_cpu is None else round(s.server_cpu, 3),
                    "xacts": s.xacts,
                    "wal_syncs": s.wal_syncs,
                    "wal_sync_ms": None if s.wal_sync_ms is None else round(s.wal_sync_ms, 1),
                    "wal_bytes": s.wal_bytes,
                    "notes": s.notes,
                }
                for s in self.samples
            ],
            "failures": self.failures,
        }


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _num(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


def ratio(
    results: dict[tuple[Case, Variant], Result], case: Case, variant: Variant
) -> float | None:
    base = results[(case, "file")].rate
    other = results[(case, variant)].rate
    return None if not base or other is None else other / base


def paired_ratio(
    results: dict[tuple[Case, Variant], Result], case: Case, variant: Variant
) -> float | None:
    """The median over repeats of ``variant / file``, each measured back to back."""
    base = {s.repeat: s.rate for s in results[(case, "file")].samples}
    pairs = [
        s.rate / base[s.repeat] for s in results[(case, variant)].samples if base.get(s.repeat)
    ]
    return statistics.median(pairs) if pairs else None


def format_table(results: dict[tuple[Case, Variant], Result], cases: list[Case]) -> str:
    lines = [
        f"{'case':<30} {'unit':>9} {'file':>9} {'postgres':>9} {'pg/file':>8} {'paired':>7} "
        f"{'pg async':>9}"
    ]
    for c in cases:
        pg_async = results.get((c, "pg-async"))
        file, pg = results[(c, "file")].rate, results[(c, "postgres")].rate
        lines.append(
            f"{c.label:<30} {UNITS[c.kind]:>9} {_num(file):>9} {_num(pg):>9} "
            f"{_num(ratio(results, c, 'postgres'), '.2f'):>8} "
            f"{_num(paired_ratio(results, c, 'postgres'), '.2f'):>7} "
            f"{_num(None if pg_async is None else pg_async.rate):>9}"
        )
    return "\n".join(lines)


def format_costs(results: dict[tuple[Case, Variant], Result], cases: list[Case]) -> str:
    lines = [
        f"{'per operation':<30} {'variant':<9} {'client CPU ms':>13} {'server CPU ms':>13} "
        f"{'xacts':>6} {'WAL syncs':>9} {'WAL bytes':>9} {'ms/WAL sync':>11}"
    ]
    for c in cases:
        for v in c.variants:
            p = results[(c, v)].per_op()
            if v == "pg-async":  # its few WAL syncs are the WAL writer's, in the background
                p["ms_per_wal_sync"] = None
            lines.append(
                f"{c.label:<30} {v:<9} {_num(p['client_cpu_ms'], '.3f'):>13} "
                f"{_num(p['server_cpu_ms'], '.3f'):>13} {_num(p['xacts'], '.2f'):>6} "
                f"{_num(p['wal_syncs'], '.2f'):>9} {_num(p['wal_bytes']):>9} "
                f"{_num(p['ms_per_wal_sync'], '.2f'):>11}"
            )
    return "\n".join(lines)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def results_json(
    results: dict[tuple[Case, Variant], Result], cases: list[Case]
) -> dict[str, dict[str, Any]]:
    """Per case: every variant's samples and summary, and the ratios to the file store."""
    return {
        c.key: {
            "label": c.label,
            "unit": UNITS[c.kind],
            **{v: results[(c, v)].to_json() for v in c.variants},
            "ratio_postgres_file": _round(ratio(results, c, "postgres")),
            "paired_ratio_postgres_file": _round(paired_ratio(results, c, "postgres")),
            "ratio_pg_async_file": _round(ratio(results, c, "pg-async"))
            if "pg-async" in c.variants
            else None,
        }
        for c in cases
    }
