"""One model answer with many tool calls: 1,000 calls next to 10,000, side by side.

Run ``python bench/wide_answer.py [--small 1000] [--large 10000] [--repeat 3] [--out FILE]``.

A run whose model answers once with N ``tool_use`` blocks (each tool returns at once), then
with a text, on a ``FileStore`` with syncs on. Timed from ``sup.start`` to the end of
``sup.wait``. Two ways of starting calls are measured, since they take different paths: tools
whose policy is ``rerun`` start in the answer's own group; ``escalate`` tools record each
``tool_started`` on its own. Each case runs in a fresh process (so one case's heap is not the
next one's), the cases take turns in an order reversed on every other repeat, and the median
of the repeats is reported, in wall time and in the process's CPU time (which other work on a
loaded machine disturbs less). Target: the large case takes about large/small times the small
one (linear), not the square of it.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import alternate, parser, say, workspace, write_results

import tether

POLICIES = ("rerun", "escalate", "rerun-traced")
"""The cases: the tools' policy, and ``-traced`` for a supervisor reporting to OpenTelemetry
(``tether.otel``, which must be installed; with no SDK configured the spans go nowhere, so what
is timed is tether's own work for them)."""


def cpu_seconds() -> float:
    """CPU time of this process so far (every thread, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(root: Path, calls: int, policy: str) -> tuple[float, float]:
    tools = tether.ToolRegistry()

    policy, _, traced = policy.partition("-")

    @tools.tool(policy=tether.ReplayPolicy(policy))
    async def look(i: int) -> int:
        """Look item ``i`` up."""
        return i

    use = tether.ScriptedModel.tool_use
    model = tether.ScriptedModel(
        [[use(f"toolu_{i}", "look", {"i": i}) for i in range(calls)], "looked them all up"]
    )
    store = tether.FileStore(root, redact=None)
    telemetry = None
    if traced:
        from tether.otel import OpenTelemetry

        telemetry = OpenTelemetry()
    async with tether.Supervisor(
        store, model=model, tools=tools, sweep_interval=None, telemetry=telemetry
    ) as sup:
        began, cpu = time.perf_counter(), cpu_seconds()
        await sup.start("wide", "look everything up")
        status = await sup.wait("wide", timeout=3600)
        took, cpu = time.perf_counter() - began, cpu_seconds() - cpu
    if status is not tether.RunStatus.DONE:
        raise RuntimeError(f"the run ended {status.value}")
    return took, cpu


def spawn(root: Path, calls: int, policy: str) -> tuple[float, float]:
    """Time one case in a fresh process (this script with ``--one``): wall and CPU seconds."""
    case = root / f"{policy}-{calls}-{time.monotonic_ns()}"
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(calls), policy, str(case)],
        check=True,
        capture_output=True,
        text=True,
    )
    timed = json.loads(out.stdout.splitlines()[-1])
    return float(timed["seconds"]), float(timed["cpu_seconds"])


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--one"]:
        calls, policy, root = int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
        seconds, cpu = anyio.run(one_run, root, calls, policy)
        print(json.dumps({"seconds": seconds, "cpu_seconds": cpu}))
        return 0
    p = parser(__doc__, out="wide_answer.json", dir_help="where to write (default: near repo)")
    p.add_argument("--small", type=int, default=1_000, help="calls in the small answer")
    p.add_argument("--large", type=int, default=10_000, help="calls in the large answer")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    cases = [(policy, n) for policy in POLICIES for n in (args.small, args.large)]
    tries: dict[str, list[float]] = {f"{policy}-{n}": [] for policy, n in cases}
    cpu_tries: dict[str, list[float]] = {f"{policy}-{n}": [] for policy, n in cases}
    with workspace(args.dir, "tether-wide-") as (root, machine):
        for repeat in range(args.repeat):
            for policy, n in alternate(cases, repeat):
                seconds, cpu = spawn(root, n, policy)
                tries[f"{policy}-{n}"].append(seconds)
                cpu_tries[f"{policy}-{n}"].append(cpu)
                say(f"{policy}, {n} calls: {seconds:.2f} s ({cpu:.2f} s of CPU)")
    report: dict[str, Any] = {"small": args.small, "large": args.large, "policies": {}}
    sizes = (args.small, args.large)
    for policy in POLICIES:
        small, large = (statistics.median(tries[f"{policy}-{n}"]) for n in sizes)
        small_cpu, large_cpu = (statistics.median(cpu_tries[f"{policy}-{n}"]) for n in sizes)
        report["policies"][policy] = {
            "small_s": small,
            "large_s": large,
            "ratio": large / small,
            "small_cpu_s": small_cpu,
            "large_cpu_s": large_cpu,
            "cpu_ratio": large_cpu / small_cpu,
            "tries": [tries[f"{policy}-{n}"] for n in sizes],
            "cpu_tries": [cpu_tries[f"{policy}-{n}"] for n in sizes],
        }
        print(
            f"{policy}: {args.small:,} calls in {small:.2f} s, {args.large:,} in {large:.2f} s: "
            f"{large / small:.1f}x for {args.large / args.small:g}x the calls "
            f"(CPU: {small_cpu:.2f} s and {large_cpu:.2f} s, {large_cpu / small_cpu:.1f}x)"
        )
    report["machine"] = machine
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
