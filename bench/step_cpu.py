"""Process CPU per step: the defaults a user gets next to the bare runtime, at 100 and 1,000 runs.

Run ``python bench/step_cpu.py [--runs 100,1000] [--steps 41] [--repeat 3] [--dir DIR]
[--profile KIND:RUNS]``.

Every case runs the same agent: one run is ``steps`` durable steps (20 tool calls answered by
21 model answers for 41), no model latency, all runs started at once in one ``Supervisor``
(sweeping, as by default, but hourly: no sweep comes during a try)
over one ``FileStore`` on a memory filesystem (``/dev/shm`` by default: a sync costs nothing
there, so what is measured is the CPU of the runtime, not the disk's). Each try is a fresh
child process, and what it reports is the process's CPU time (every thread, ``io_uring``'s
kernel workers included) from the first start to the last end, divided by the steps.

The kinds, from what a user gets to the bare runtime:

- ``defaults``: ``ScriptedModel`` with a script function, the default ``SecretRedactor``, the
  interpreter's default garbage-collector settings.
- ``scripted``: the same without redaction.
- ``copyfree``: a model that builds its reply from ``len(messages)`` and copies nothing,
  without redaction, default GC.
- ``bare``: ``copyfree`` with the cyclic garbage collector off while the runs go (the runtime
  with nothing of its allocations' collection left in it).
- ``worker``: ``defaults`` with the collector set as ``tether worker`` sets it in its own
  process (``tune_collector``: ``gc.freeze()`` and a first-generation threshold of 10,000).

Tries take turns (the kinds in order, then reversed), ``--repeat`` rounds per number of runs,
and each case reports its median try, the min-max of its tries, the collections of its first
try by generation, the median CPU its collections took per step (``gc.callbacks``) and
``tracked``: the most objects the collector tracked when a collection of an older generation
began (counted then with ``gc.get_objects()``, whose CPU is left out; ``-`` when none came, as
with the collector off). Unlike CPU time, the count hardly moves between tries. The ratios the
project holds itself to: ``defaults`` ÷ ``bare`` at 100 runs (at most 1.25) and ``defaults``
at 1,000 runs ÷ ``defaults`` at 100 (at most 1.15), each also given per round (paired tries).

``--before SRC`` adds, for each kind, the same kind run with ``SRC`` (the ``src`` directory of
another checkout of tether) first on ``PYTHONPATH`` (``KIND@before``), taking turns with the
others, and the ratios of each kind to its ``@before``: a change measured side by side with
what it changed, in one run.

``--profile KIND:RUNS`` runs one try in this process under ``cProfile`` and prints the
functions by their own time instead.

``--instructions`` counts instructions per step instead of CPU time (valgrind's
``cachegrind``, see ``_instructions``): each kind once at each of two numbers of runs
(``--runs``, 100 and 300 by default), one after another, and the ratios of the counts. CPU time
moves 5-10 % between tries here; a count moves about 0.1 %, so a change of a few percent shows.
It leaves out the kernel's work and cache misses, so a claim about CPU time is still made
with CPU time. Results go to ``bench/results/step_instructions.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _instructions
import anyio
from _harness import RESULTS, alternate, say, workspace, write_results

import tether
from tether.models import ModelReply, ScriptedModel

if TYPE_CHECKING:  # names for annotations only: a tether of before they were public runs too
    from tether.models import ContentBlock, Message, SystemPrompt, ToolDefinition

try:
    from tether.supervisor._worker import tune_collector
except ImportError:  # a tether from before ``tether worker`` tuned its collector (``--before``)

    def tune_collector() -> None:
        """What ``tether worker`` does to its process's collector, for an older tether."""
        gc.collect()
        gc.freeze()
        _, second, third = gc.get_threshold()
        gc.set_threshold(10_000, second, third)


KINDS = ("defaults", "scripted", "copyfree", "bare", "worker")
SCRIPT = Path(__file__).resolve()
CASE_TIMEOUT = 900.0


def tool_calls_for(steps: int) -> int:
    """Tool calls of a run of ``steps`` steps: each answered, then a final answer."""
    return (steps - 1) // 2


def scripted_model(calls: int) -> tether.ScriptedModel:
    """``ScriptedModel`` over a script function: call ``i`` of tool ``step``, then a text."""

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        # The same decision as ``CopyFreeModel``'s (the prompt, then an answer and a result per
        # step), so that the two differ by what ``ScriptedModel`` does, not by their scripts.
        step = len(messages) // 2
        if step < calls:
            return [tether.ScriptedModel.tool_use(f"toolu_{step}", "step", {"n": step})]
        return "done"

    return tether.ScriptedModel(script, name="scripted-cpu")


class CopyFreeModel:
    """A ``tether.Model`` that answers from ``len(messages)`` alone and copies nothing."""

    name = "copy-free"
    params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

    def __init__(self, calls: int) -> None:
        self._tool_calls = calls
        self.calls = 0

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        self.calls += 1
        step = len(messages) // 2
        if step >= self._tool_calls:
            return ModelReply(content=[{"type": "text", "text": "done"}])
        block = ScriptedModel.tool_use(f"toolu_{step}", "step", {"n": step})
        return ModelReply(content=[block], stop_reason="tool_use")


def _tools() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(n: int) -> dict[str, Any]:
        """One step."""
        return {"n": n, "ok": True}

    return tools


class _GcTimer:
    """A ``gc.callbacks`` entry that adds up the CPU time of collections, by generation, and
    counts the objects the collector tracks when a collection of an older generation starts
    (the largest count is ``tracked``, ``None`` if none came; the counts' own CPU is
    ``counting``, left out of the case's)."""

    def __init__(self) -> None:
        self.spent = [0.0, 0.0, 0.0]
        self.tracked: int | None = None
        self.counting = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            if info["generation"] > 0:
                counted = time.process_time()
                self.tracked = max(self.tracked or 0, len(gc.get_objects()))
                self.counting += time.process_time() - counted
            self._started = time.process_time()
        else:
            self.spent[info["generation"]] += time.process_time() - self._started


async def _case(kind: str, runs: int, steps: int, root: Path) -> dict[str, Any]:
    calls = tool_calls_for(steps)
    scripted = kind in ("defaults", "scripted", "worker")
    model: Any = scripted_model(calls) if scripted else CopyFreeModel(calls)
    redact: Any = tether.SecretRedactor() if kind in ("defaults", "worker") else None
    store = tether.FileStore(root, redact=redact)
    # Sweeps on, as a default supervisor has them (a drive then trusts its run's inbox mark
    # when the run rests), but hourly: none comes during a try, whose CPU is the steps'.
    async with tether.Supervisor(store, model=model, tools=_tools(), sweep_interval=3600) as sup:
        budgets = tether.Budgets(max_model_calls=None)
        await sup.start("warm-up", "go", budgets=budgets)  # lazily built state out of the count
        await sup.wait("warm-up")
        calls0 = model.calls
        gc.collect()
        if kind == "bare":
            gc.disable()
        elif kind == "worker":
            tune_collector()
        before = [s["collections"] for s in gc.get_stats()]
        gc_time = _GcTimer()
        gc.callbacks.append(gc_time)
        cpu0, wall0 = time.process_time(), time.perf_counter()

        async def one(i: int) -> None:
            run_id = f"run-{i:05d}"
            await sup.start(run_id, f"job {i}", budgets=budgets)
            status = await sup.wait(run_id)
            assert status is tether.RunStatus.DONE, status

        async with anyio.create_task_group() as tg:
            for i in range(runs):
                tg.start_soon(one, i)
        cpu, wall = time.process_time() - cpu0 - gc_time.counting, time.perf_counter() - wall0
        collections = [s["collections"] - b for s, b in zip(gc.get_stats(), before, strict=True)]
        gc.callbacks.remove(gc_time)
        gc.enable()
        model_calls = model.calls - calls0
    total = model_calls + calls * runs
    return {
        "kind": kind,
        "runs": runs,
        "steps": total,
        "cpu_s": cpu,
        "wall_s": wall,
        "us_per_step": cpu / total * 1e6,
        "gc_collections": collections,
        "gc_us_per_step": [t / total * 1e6 for t in gc_time.spent],
        "tracked_objects": gc_time.tracked,
        "io_uring": store.uses_io_uring,
    }


def _child(
    kind: str, runs: int, steps: int, root: Path, before: Path | None
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one try of ``kind`` (``KIND@before``: with
    ``before`` first on ``PYTHONPATH``)."""
    base, _, where = kind.partition("@")
    argv = [sys.executable, str(SCRIPT), "--child", base, str(runs), str(steps), "--dir", str(root)]
    env = dict(os.environ)
    if where == "before" and before is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(before), env.get("PYTHONPATH", "")])
    return argv, env


def _spawn(
    kind: str, runs: int, steps: int, root: Path, before: Path | None = None
) -> dict[str, Any]:
    argv, env = _child(kind, runs, steps, root, before)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=CASE_TIMEOUT, check=False, env=env
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{kind} at {runs} runs failed (exit {proc.returncode}): {tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["kind"] = kind
    return result


def count_instructions(
    kinds: list[str], sizes: list[int], steps: int, root: Path, before: Path | None
) -> dict[str, Any]:
    """Instructions per step of each kind (``_instructions``), one try after another, and the
    same ratios as of CPU time where both sides were counted."""
    per: dict[str, float] = {}
    cases = []
    for kind in kinds:
        counts = {}
        for runs in sizes:
            name = f"{kind} at {runs:,} runs"
            counts[runs] = _instructions.count(name, *_child(kind, runs, steps, root, before))
            say(f"  {kind:<16} {runs:>5} runs {counts[runs]:>16,} instructions")
        per[kind] = _instructions.per_step(counts, 2 * tool_calls_for(steps) + 1)
        cases.append({"kind": kind, "instructions": counts, "per_step": round(per[kind])})
    ratios = {}
    pairs = [(k.removesuffix("@before"), k) for k in kinds if k.endswith("@before")]
    pairs += [("defaults", "bare")]
    for a, b in pairs:
        if a in per and b in per:
            ratios[f"{a} / {b.replace('@', ' ')}"] = per[a] / per[b]
    return {"cases": cases, "ratios": ratios}


def format_instructions(report: dict[str, Any], sizes: list[int]) -> str:
    lines = [f"instructions per step, from {sizes[0]:,} to {sizes[1]:,} runs"]
    for case in report["cases"]:
        lines.append(f"{case['kind']:<16} {case['per_step']:>10,}")
    lines.append("")
    lines += [f"{name}: {r:.3f}x" for name, r in report["ratios"].items()]
    return "\n".join(lines)


def _profile(spec: str, steps: int, root: Path) -> None:
    import cProfile
    import pstats

    kind, runs = spec.split(":")
    prof = cProfile.Profile()
    prof.enable()
    result = anyio.run(_case, kind, int(runs), steps, root)
    prof.disable()
    print(json.dumps(result))
    pstats.Stats(prof).sort_stats("tottime").print_stats(40)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--runs", default=None, help="comma-separated numbers of runs (100,1000; 100,300 counted)"
    )
    p.add_argument("--steps", type=int, default=41, help="durable steps per run (odd)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of tries (median reported)")
    p.add_argument("--kinds", default=",".join(KINDS[:4]), help="comma-separated kinds to run")
    p.add_argument("--dir", type=Path, default=Path("/dev/shm"), help="where the stores go")
    p.add_argument("--out", type=Path, default=None, help="results file")
    p.add_argument("--before", type=Path, default=None, help="src of the tether to compare with")
    p.add_argument("--profile", default=None, metavar="KIND:RUNS", help="profile one try")
    p.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per step under valgrind instead (--runs: two numbers)",
    )
    p.add_argument("--child", nargs=3, metavar=("KIND", "RUNS", "STEPS"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, runs, steps = args.child
        workdir = Path(tempfile.mkdtemp(prefix="case-", dir=args.dir))
        try:
            print(json.dumps(anyio.run(_case, kind, int(runs), int(steps), workdir)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    if args.profile:
        with workspace(args.dir, "tether-cpu-") as (root, _):
            _profile(args.profile, args.steps, root)
        return 0
    kinds = [k for k in args.kinds.split(",") if k]
    if args.before is not None:
        kinds += [f"{k}@before" for k in kinds]
    if args.instructions:
        return _main_instructions(args, kinds)
    sizes = [int(n) for n in (args.runs or "100,1000").split(",")]
    tries: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with workspace(args.dir, "tether-cpu-") as (root, info):
        started = time.perf_counter()
        for rep in range(args.repeat):
            for runs in alternate(sizes, rep):
                for kind in alternate(kinds, rep):
                    res = _spawn(kind, runs, args.steps, root, args.before)
                    tries.setdefault((kind, runs), []).append(res)
                    per_step = res["us_per_step"]
                    say(f"  round {rep + 1}: {kind:<16} {runs:>5} runs {per_step:6.1f} µs")
        elapsed = time.perf_counter() - started
    report = summarize(tries, kinds, sizes)
    print(format_report(report))
    print(f"\n{elapsed:.0f} s; {info['filesystem']}, {info.get('cpu', '')}")
    out = args.out or RESULTS / "step_cpu.json"
    write_results(out, {"machine": info, "steps_per_run": args.steps, **report})
    return 0


def _main_instructions(args: argparse.Namespace, kinds: list[str]) -> int:
    sizes = [int(n) for n in (args.runs or "100,300").split(",")]
    if len(sizes) != 2 or sizes[0] == sizes[1]:
        raise SystemExit("--instructions counts at two different numbers of runs (--runs A,B)")
    if _instructions.valgrind() is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    with workspace(args.dir, "tether-cpu-") as (root, info):
        started = time.perf_counter()
        report = count_instructions(kinds, sizes, args.steps, root, args.before)
        elapsed = time.perf_counter() - started
    print(format_instructions(report, sizes))
    print(f"\n{elapsed:.0f} s")
    out = args.out or RESULTS / "step_instructions.json"
    write_results(out, {"machine": info, "steps_per_run": args.steps, "runs": sizes, **report})
    return 0


def summarize(
    tries: dict[tuple[str, int], list[dict[str, Any]]], kinds: list[str], sizes: list[int]
) -> dict[str, Any]:
    """Medians per case, and the ratios (of the medians, and min-max of the paired rounds)."""
    cases = []
    for (kind, runs), results in tries.items():
        per_step = [r["us_per_step"] for r in results]
        cases.append(
            {
                "kind": kind,
                "runs": runs,
                "us_per_step": statistics.median(per_step),
                "tries_us": per_step,
                "gc_collections": results[0]["gc_collections"],
                "gc_us": statistics.median(sum(r["gc_us_per_step"]) for r in results),
                "tracked_objects": _median_of_known(r.get("tracked_objects") for r in results),
                "io_uring": results[0]["io_uring"],
            }
        )
    ratios: dict[str, dict[str, Any]] = {}

    def ratio(name: str, a: tuple[str, int], b: tuple[str, int], target: float) -> None:
        if a not in tries or b not in tries:
            return
        pa = [r["us_per_step"] for r in tries[a]]
        pb = [r["us_per_step"] for r in tries[b]]
        paired = [x / y for x, y in zip(pa, pb, strict=False)]
        ratios[name] = {
            "ratio": statistics.median(pa) / statistics.median(pb),
            "paired_min": min(paired),
            "paired_max": max(paired),
            "target": target,
        }

    for kind in kinds:
        if kind.endswith("@before"):
            base = kind.removesuffix("@before")
            for runs in sizes:
                ratio(f"{base} / before at {runs:,} runs", (base, runs), (kind, runs), 0.5)
    if 100 in sizes:
        ratio("defaults / bare at 100 runs", ("defaults", 100), ("bare", 100), 1.25)
    if 100 in sizes and 1000 in sizes:
        ratio("defaults 1,000 / 100 runs", ("defaults", 1000), ("defaults", 100), 1.15)
        ratio("bare 1,000 / 100 runs", ("bare", 1000), ("bare", 100), 1.15)
    return {"cases": cases, "ratios": ratios}


def _median_of_known(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known)) if known else None


def format_report(report: dict[str, Any]) -> str:
    lines = [
        "case                         µs/step (median)  tries            gc gen0/1/2  gc µs/step"
        "  tracked"
    ]
    for c in sorted(report["cases"], key=lambda c: (c["runs"], c["kind"])):
        tries = ", ".join(f"{t:.0f}" for t in c["tries_us"])
        gcs = "/".join(str(n) for n in c["gc_collections"])
        case = f"{c['kind']:<16} {c['runs']:>5} runs"
        gc_us = f"{c['gc_us']:10.1f}" if "gc_us" in c else ""
        tracked = c.get("tracked_objects")
        held = f"{tracked:9,}" if tracked is not None else f"{'-':>9}"
        lines.append(f"{case}  {c['us_per_step']:8.1f}  {tries:<16} {gcs:<12} {gc_us}  {held}")
    lines.append("")
    for name, r in report["ratios"].items():
        verdict = "met" if r["ratio"] <= r["target"] else "MISSED"
        lines.append(
            f"{name}: {r['ratio']:.2f}x (rounds {r['paired_min']:.2f}-{r['paired_max']:.2f}; "
            f"target <= {r['target']}: {verdict})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
