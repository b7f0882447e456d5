"""What the supervisor bench reports: per case, per point, against the peers and the ceiling.

The latency ceiling of a point is the most steps per second any system can reach there:
each run makes its ``MODEL_CALLS`` model calls one after another, each taking at least the
model's latency, so ``runs`` runs started at once take at least ``MODEL_CALLS * latency`` for
``runs * STEPS`` steps: ``runs / latency * STEPS / MODEL_CALLS`` steps/s (3,600 at 100 runs and
50 ms: nine steps a run over five model calls). A point is latency-bound when that ceiling is
below what tether does at the same number of runs with no latency (the CPU's bound); there the
target is to come within 0.95 times the ceiling. With no latency (0 ms) the CPU is the bound
and the target is ten times LangGraph's and DBOS's steps/s. A point with a latency whose
ceiling is above what the machine can do at all is CPU-bound too: its figures are reported,
against neither target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _agent import MODEL_CALLS, STEPS
from _harness import pyplot
from _resources import KiB
from _scale_plan import BASELINES, LATENCIES_MS
from _scale_result import CaseResult
from _scale_tether import PARK_BATCH

PEER_TARGET = 10.0
"""tether's steps/s over LangGraph's and DBOS's where the CPU is the bound."""
CEILING_TARGET = 0.95
"""tether's share of the latency ceiling where the model's latency is the bound."""
FRAMEWORKS = ("langgraph", "dbos")


def latency_ceiling(runs: int, latency_ms: int) -> float | None:
    """The steps/s no system can pass at this point (``None`` at 0 ms: only the CPU bounds)."""
    if latency_ms <= 0:
        return None
    return runs / (latency_ms / 1000) * STEPS / MODEL_CALLS


def by_key(results: list[CaseResult]) -> dict[str, CaseResult]:
    return {r.key: r for r in results}


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / KiB / KiB:.0f}"


def _kib(n: float | None) -> str:
    return "-" if n is None else f"{n / KiB:.2f}"


def format_results(results: list[CaseResult]) -> str:
    head = (
        f"{'case':<26} {'wall s':>8} {'steps/s':>9} {'fsyncs/s':>9} {'peak MiB':>9} "
        f"{'KiB/active':>10} {'peak fds':>8}  notes"
    )
    lines = [head]
    for r in results:
        if r.kind.startswith("parked"):
            continue
        if r.skipped is not None:
            lines.append(f"{r.key:<26} skipped: {r.skipped}")
            continue
        fps = r.fsyncs_per_s
        lines.append(
            f"{r.key:<26} {r.wall_s:>8.2f} {r.steps_per_s:>9.0f} "
            f"{'-' if fps is None else f'{fps:.0f}':>9} {_mib(r.peak_rss):>9} "
            f"{_kib(r.rss_per_active_run):>10} {r.peak_fds:>8}  "
            + ("" if r.ok else "INCOMPLETE ")
            + "; ".join(r.notes + ([f"tries: {r.samples}"] if len(r.samples) > 1 else []))
        )
    return "\n".join(lines)


def format_parked(results: list[CaseResult]) -> str:
    lines = []
    for r in results:
        if not r.kind.startswith("parked"):
            continue
        if r.skipped is not None:
            lines.append(f"{r.key}: skipped: {r.skipped}")
            continue
        if r.kind == "parked":
            lines.append(
                f"{r.runs} parked runs: RSS {_mib(r.baseline_rss)} -> {_mib(r.parked_rss)} MiB, "
                f"{_kib(r.rss_per_parked_run)} KiB per parked run; open fds "
                f"{r.baseline_fds} before, {r.parked_fds} parked (peak {r.peak_fds} while "
                f"parking, {PARK_BATCH} at a time)"
            )
        else:
            held = None if r.heap_per_parked_run is None else r.heap_per_parked_run * r.runs
            lines.append(
                f"{r.runs} parked runs: Python heap +{_kib(held)} KiB, "
                f"{_kib(r.heap_per_parked_run)} KiB per parked run (tracemalloc)"
            )
    return "\n".join(lines)


def ratios(results: list[CaseResult]) -> list[dict[str, Any]]:
    """tether's steps/s over each baseline's, at every point where both finished."""
    table = by_key(results)
    out = []
    for r in results:
        if r.kind not in BASELINES or not r.ok or r.steps_per_s <= 0:
            continue
        mine = table.get(f"tether/{r.latency_ms}ms/n{r.runs}")
        if mine is None or not mine.ok:
            continue
        row: dict[str, Any] = {
            "baseline": r.kind,
            "latency_ms": r.latency_ms,
            "runs": r.runs,
            "tether_steps_per_s": round(mine.steps_per_s, 1),
            "baseline_steps_per_s": round(r.steps_per_s, 1),
            "ratio": round(mine.steps_per_s / r.steps_per_s, 2),
        }
        paired = paired_ratios(mine.samples, r.samples)
        if paired:
            row["paired_min"], row["paired_max"] = round(min(paired), 2), round(max(paired), 2)
        out.append(row)
    return out


def paired_ratios(mine: list[float] | None, theirs: list[float] | None) -> list[float]:
    """The ratio of each round's tries (the tries of a point are kept in round order, and the
    two systems took turns within each round); none unless both ran every round."""
    if not mine or not theirs or len(mine) != len(theirs):
        return []
    return [m / t for m, t in zip(mine, theirs, strict=True) if t > 0]


def ceilings(results: list[CaseResult]) -> list[dict[str, Any]]:
    """At every point with a model latency: its ceiling, what bounds it, and each system's
    steps/s as a share of the ceiling (``bound`` is ``"latency"`` when the ceiling is below
    tether's steps/s with no latency at the same number of runs, else ``"cpu"``)."""
    table = by_key(results)
    points = sorted(
        {(r.runs, r.latency_ms) for r in results if r.latency_ms > 0 and r.kind != "parked"}
    )
    out = []
    for runs, latency_ms in points:
        ceiling = latency_ceiling(runs, latency_ms)
        assert ceiling is not None
        cpu = table.get(f"tether/0ms/n{runs}")
        cpu_rate = cpu.steps_per_s if cpu is not None and cpu.ok else None
        shares = {
            r.kind: round(r.steps_per_s / ceiling, 3)
            for r in results
            if r.runs == runs and r.latency_ms == latency_ms and r.ok
        }
        out.append(
            {
                "runs": runs,
                "latency_ms": latency_ms,
                "ceiling_steps_per_s": round(ceiling, 1),
                "cpu_bound_steps_per_s": None if cpu_rate is None else round(cpu_rate, 1),
                "bound": None if cpu_rate is None else ("latency" if ceiling < cpu_rate else "cpu"),
                "share_of_ceiling": shares,
            }
        )
    return out


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    goal: str
    met: bool | None


def targets(
    results: list[CaseResult], rats: list[dict[str, Any]], ceils: list[dict[str, Any]]
) -> list[Target]:
    tether_runs = [r for r in results if r.kind == "tether"]
    most = max((r.runs for r in tether_runs), default=0)
    big = [r for r in tether_runs if r.runs == most]
    out = [
        Target(
            f"{most:,} runs complete in one process",
            float(sum(r.completed for r in big)),
            f"{most * len(big):,} completed",
            bool(big) and all(r.ok for r in big),
        )
    ]
    parked = next((r for r in results if r.kind == "parked" and r.ok), None)
    heap = next((r for r in results if r.kind == "parked-heap" and r.ok), None)
    if parked is not None:
        per = parked.rss_per_parked_run
        out.append(
            Target("RSS per parked run (bytes)", per, "<= 2048", per is not None and per <= 2 * KiB)
        )
        extra = None if parked.parked_fds is None else parked.parked_fds - parked.baseline_fds
        out.append(
            Target("descriptors held by parked runs", extra, "0", extra is not None and extra <= 0)
        )
    if heap is not None:
        per = heap.heap_per_parked_run
        out.append(
            Target(
                "Python heap per parked run (bytes)",
                per,
                "<= 2048",
                per is not None and per <= 2 * KiB,
            )
        )
    goal = f">= {PEER_TARGET:.0f}x at every N, 0 ms"
    for base in FRAMEWORKS:
        mine = [q["ratio"] for q in rats if q["baseline"] == base and q["latency_ms"] == 0]
        worst = min(mine, default=None)
        name = f"steps/s vs {base}, CPU-bound (lowest ratio)"
        out.append(Target(name, worst, goal, None if worst is None else worst >= PEER_TARGET))
    bound = [c["share_of_ceiling"].get("tether") for c in ceils if c["bound"] == "latency"]
    shares = [s for s in bound if s is not None]
    worst = min(shares, default=None)
    out.append(
        Target(
            "share of the latency ceiling, latency-bound (lowest)",
            worst,
            f">= {CEILING_TARGET}x where latency-bound",
            None if worst is None else worst >= CEILING_TARGET,
        )
    )
    return out


def format_ratios(rats: list[dict[str, Any]], tgts: list[Target]) -> str:
    lines = [f"{'tether steps/s vs':<30} {'tether':>9} {'other':>9} {'ratio':>8}"]
    for q in rats:
        name = f"{q['baseline']} {q['latency_ms']}ms n={q['runs']}"
        spread = f"  ({q['paired_min']:.2f}-{q['paired_max']:.2f})" if "paired_min" in q else ""
        lines.append(
            f"{name:<30} {q['tether_steps_per_s']:>9.0f} {q['baseline_steps_per_s']:>9.0f} "
            f"{q['ratio']:>7.2f}x{spread}"
        )
    lines.append("")
    lines.append(f"{'target':<52} {'value':>10} {'goal':>30}  status")
    for t in tgts:
        status = "n/a" if t.met is None else ("met" if t.met else "MISSED")
        value = "-" if t.value is None else f"{t.value:,.2f}"
        lines.append(f"{t.name:<52} {value:>10} {t.goal:>30}  {status}")
    return "\n".join(lines)


def format_ceilings(ceils: list[dict[str, Any]]) -> str:
    kinds = ("tether", *BASELINES)
    head = f"{'latency ceiling':<18} {'steps/s':>9} {'0 ms':>9} {'bound':>8} "
    lines = [head + " ".join(f"{k:>13}" for k in kinds)]
    for c in ceils:
        cpu = c["cpu_bound_steps_per_s"]
        cells = [c["share_of_ceiling"].get(k) for k in kinds]
        lines.append(
            f"{c['latency_ms']}ms n={c['runs']:<10} {c['ceiling_steps_per_s']:>9,.0f} "
            f"{'-' if cpu is None else f'{cpu:,.0f}':>9} {c['bound'] or '-':>8} "
            + " ".join(f"{'-' if s is None else f'{s:.2f}x':>13}" for s in cells)
        )
    return "\n".join(lines)


def plot(results: list[CaseResult], path: Path) -> str | None:
    """Steps/s and peak RSS by runs in one process, per system and latency; or why not."""
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed; no plot"
    fig, (ax_rate, ax_rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    colours = {"tether": "C0", "sqlite": "C1", "langgraph": "C2", "dbos": "C3"}
    for kind, colour in colours.items():
        for lat in LATENCIES_MS:
            rows = sorted(
                (r for r in results if r.kind == kind and r.latency_ms == lat and r.ok),
                key=lambda r: r.runs,
            )
            if not rows:
                continue
            xs = [r.runs for r in rows]
            style = "-" if lat == 0 else "--"
            label = f"{kind}, model {lat} ms"
            ax_rate.plot(
                xs, [r.steps_per_s for r in rows], style, color=colour, marker="o", label=label
            )
            ax_rss.plot(
                xs,
                [r.peak_rss / KiB / KiB for r in rows],
                style,
                color=colour,
                marker="o",
                label=label,
            )
    for ax, title, unit in (
        (ax_rate, "steps/s (model + tool calls)", "steps/s"),
        (ax_rss, "peak RSS of the process", "MiB"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("runs in one process (all started at once)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_rate.legend(fontsize=8)
    fig.suptitle("Nine-step scripted agent, every step durable before the next")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
