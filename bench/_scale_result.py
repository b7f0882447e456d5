"""What one case of the supervisor bench measured, in the child process that ran it.

Every system fills a ``CaseResult`` the same way: ``steps`` (model plus tool calls made),
``wall_s`` from the first run started to the last finished, ``completed`` runs that reached
their end state, and what ``Sampler`` saw. The child prints it as one JSON line, the parent
reads it back (``from_json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from _resources import Sampler, peak_rss_bytes


@dataclass
class CaseResult:
    """What one child process measured (RSS in bytes, times in seconds)."""

    kind: str
    latency_ms: int
    runs: int
    ok: bool = True
    skipped: str | None = None
    wall_s: float = 0.0
    steps: int = 0
    fsyncs: int | None = None
    completed: int = 0
    baseline_rss: int = 0
    peak_rss: int = 0
    sampled_peak_rss: int = 0
    busiest: int = 0
    rss_at_busiest: int = 0
    baseline_fds: int = 0
    peak_fds: int = 0
    parked_rss: int | None = None
    parked_fds: int | None = None
    heap_before: int | None = None
    heap_parked: int | None = None
    samples: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def failed(cls, kind: str, latency_ms: int, runs: int, why: str) -> CaseResult:
        return cls(kind, latency_ms, runs, ok=False, skipped=why)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseResult:
        """Back from ``to_json`` (the derived figures are dropped and computed again)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.latency_ms}ms/n{self.runs}"

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def fsyncs_per_s(self) -> float | None:
        return None if self.fsyncs is None or self.wall_s <= 0 else self.fsyncs / self.wall_s

    @property
    def rss_per_active_run(self) -> float | None:
        if self.busiest <= 0:
            return None
        return (self.rss_at_busiest - self.baseline_rss) / self.busiest

    @property
    def rss_per_parked_run(self) -> float | None:
        if self.parked_rss is None or self.runs <= 0:
            return None
        return (self.parked_rss - self.baseline_rss) / self.runs

    @property
    def heap_per_parked_run(self) -> float | None:
        if self.heap_parked is None or self.heap_before is None or self.runs <= 0:
            return None
        return (self.heap_parked - self.heap_before) / self.runs

    def take(self, sampler: Sampler) -> None:
        """Copy what the sampler saw, and the process's peak RSS, into the result."""
        self.peak_rss = peak_rss_bytes()
        self.sampled_peak_rss = sampler.max_rss
        self.peak_fds = sampler.max_fds
        self.busiest, self.rss_at_busiest = sampler.busiest, sampler.rss_at_busiest

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["key"] = self.key
        out["steps_per_s"] = round(self.steps_per_s, 1)
        fps = self.fsyncs_per_s
        out["fsyncs_per_s"] = None if fps is None else round(fps, 1)
        for name in ("rss_per_active_run", "rss_per_parked_run", "heap_per_parked_run"):
            value = getattr(self, name)
            out[name] = None if value is None else round(value, 1)
        return out
