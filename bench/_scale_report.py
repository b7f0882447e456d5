"""What the supervisor bench reports: per case, per point, against the peers and the targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import pyplot
from _resources import KiB
from _scale_plan import BASELINES, LATENCIES_MS
from _scale_result import CaseResult
from _scale_tether import PARK_BATCH


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
        out.append(
            {
                "baseline": r.kind,
                "latency_ms": r.latency_ms,
                "runs": r.runs,
                "tether_steps_per_s": round(mine.steps_per_s, 1),
                "baseline_steps_per_s": round(r.steps_per_s, 1),
                "ratio": round(mine.steps_per_s / r.steps_per_s, 2),
            }
        )
    return out


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    goal: str
    met: bool | None


def targets(results: list[CaseResult], rats: list[dict[str, Any]]) -> list[Target]:
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
    for base in ("langgraph", "dbos"):
        mine = [q for q in rats if q["baseline"] == base]
        if not mine:
            out.append(Target(f"steps/s vs {base}", None, ">= 10x at every N and latency", None))
            continue
        worst = min(q["ratio"] for q in mine)
        out.append(
            Target(
                f"steps/s vs {base} (lowest ratio)",
                worst,
                ">= 10x at every N and latency",
                worst >= 10,
            )
        )
    return out


def format_ratios(rats: list[dict[str, Any]], tgts: list[Target]) -> str:
    lines = [f"{'tether steps/s vs':<30} {'tether':>9} {'other':>9} {'ratio':>8}"]
    for q in rats:
        name = f"{q['baseline']} {q['latency_ms']}ms n={q['runs']}"
        lines.append(
            f"{name:<30} {q['tether_steps_per_s']:>9.0f} {q['baseline_steps_per_s']:>9.0f} "
            f"{q['ratio']:>7.2f}x"
        )
    lines.append("")
    lines.append(f"{'target':<44} {'value':>10} {'goal':>30}  status")
    for t in tgts:
        status = "n/a" if t.met is None else ("met" if t.met else "MISSED")
        value = "-" if t.value is None else f"{t.value:,.1f}"
        lines.append(f"{t.name:<44} {value:>10} {t.goal:>30}  {status}")
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
