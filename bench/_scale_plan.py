"""Which cases the supervisor bench runs, in which order, each in a child process of its own.

A case is one system at one point: a number of runs started at once and a model latency.
Where systems are compared (up to ``baseline_max`` runs), the cases of a point form a round
that is repeated, in alternating order, and each case reports its median try. Every try runs
in a fresh child process (``python supervisor_scale.py --child KIND LATENCY_MS RUNS``), so
its peak RSS and descriptor counts are its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
from _harness import BENCH
from _scale_result import CaseResult
from _scale_tether import case_parked, case_tether
from peers import PEERS, missing

SCRIPT = BENCH / "supervisor_scale.py"
LATENCIES_MS = (0, 50)
CASE_TIMEOUT = 900.0

Kind = Literal["tether", "tether-nosync", "sqlite", "langgraph", "dbos", "parked", "parked-heap"]
BASELINES: tuple[Kind, ...] = ("tether-nosync", "sqlite", "langgraph", "dbos")
"""What ``tether`` is compared with; against ``tether-nosync`` the ratio is the share of the
CPU-bound ceiling that the durable case reaches."""


@dataclass(frozen=True)
class Case:
    kind: Kind
    latency_ms: int
    runs: int

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.latency_ms}ms/n{self.runs}"


def build_cases(quick: bool, baseline_max: int, dbos_max: int) -> list[Case]:
    """Every point for tether, the baselines where ``runs`` allows, the parked cases last.

    10 runs at 50 ms is a point where the model's latency, not the CPU, bounds every system
    on a small machine: there the latency ceiling can be reached.
    """
    sizes = (10, 100, 1000) if quick else (10, 100, 1000, 10_000)
    cases: list[Case] = []
    for n in sizes:
        for lat in LATENCIES_MS:
            cases.append(Case("tether", lat, n))
            if n <= baseline_max:
                cases += [Case(kind, lat, n) for kind in BASELINES if kind != "dbos"]
            if n <= min(baseline_max, dbos_max):
                cases.append(Case("dbos", lat, n))
    parked_n = sizes[-1]
    cases += [Case("parked", 0, parked_n), Case("parked-heap", 0, parked_n)]
    return cases


@dataclass(frozen=True)
class Round:
    """Cases measured together: each repetition runs every case once, in turn."""

    cases: list[Case]
    repeat: int


def rounds_of(cases: list[Case], repeat: int, baseline_max: int) -> list[Round]:
    """Group the cases of one point (runs, latency) so that they take turns ``repeat`` times.

    Only points with baselines are repeated: there a ratio is taken, and taking turns spreads
    the machine's drift over every system instead of onto whichever ran last.
    """
    points: dict[tuple[int, int, bool], list[Case]] = {}
    for case in cases:
        parked = case.kind.startswith("parked")
        points.setdefault((case.runs, case.latency_ms, parked), []).append(case)
    return [
        Round(group, repeat if runs <= baseline_max and not parked else 1)
        for (runs, _, parked), group in points.items()
    ]


def spawn_case(case: Case, root: Path) -> CaseResult:
    """Run one try of ``case`` in a child process, in a fresh directory under ``root``."""
    workdir = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    argv = [sys.executable, str(SCRIPT), "--child", case.kind, str(case.latency_ms)]
    try:
        proc = subprocess.run(
            [*argv, str(case.runs), "--dir", str(workdir)],
            capture_output=True,
            text=True,
            timeout=CASE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        why = f"timed out after {CASE_TIMEOUT:.0f} s"
        return CaseResult.failed(case.kind, case.latency_ms, case.runs, why)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"failed (exit {proc.returncode}): {tail[:300]}"
        return CaseResult.failed(case.kind, case.latency_ms, case.runs, why)
    return CaseResult.from_json(json.loads(lines[-1]))


def run_case(kind: str, latency_ms: int, runs: int, root: Path) -> CaseResult:
    """One try, in this process (the child's side of ``spawn_case``)."""
    res = CaseResult(kind=kind, latency_ms=latency_ms, runs=runs)
    why = missing(kind)
    if why is not None:
        res.ok, res.skipped = False, why
        return res
    if kind == "tether":
        anyio.run(case_tether, res, root)
    elif kind == "tether-nosync":
        anyio.run(lambda: case_tether(res, root, sync=False))
    elif kind == "parked":
        anyio.run(lambda: case_parked(res, root, heap=False))
    elif kind == "parked-heap":
        anyio.run(lambda: case_parked(res, root, heap=True))
    elif kind in PEERS:
        PEERS[kind].run(res, root)
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    if res.completed != res.runs:
        res.ok = False
        res.notes.append(f"only {res.completed} of {res.runs} runs reached their end state")
    return res
