"""Parked sleeping runs: what each costs a process (tasks, descriptors, memory).

Run ``python bench/sleeping_runs.py [--runs 10000] [--out FILE]``.

Starts N runs whose one tool call sleeps for an hour (``tether.sleep_for``), waits until all
are parked (status ``waiting``), then counts the process's asyncio tasks and open descriptors,
and its memory, next to the same process before the runs existed. Syncs are switched off (the
``FileOps`` seam) so the bench is quick; parking is what is measured. Target: no task and no
descriptor per parked run (the supervisor's one timer serves every wake-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _machine import machine_info
from _nosync import NoSyncOps

import tether

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sleeping_runs.json"


def _rss_kib() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


async def measure(root: Path, runs: int) -> dict[str, Any]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def check_later(n: int) -> tether.Wait:
        """Check again in an hour."""
        return tether.sleep_for(3600, result="checked")

    use = tether.ScriptedModel.tool_use
    model = tether.ScriptedModel([[use("toolu_1", "check_later", {"n": 1})], "done"])
    store = tether.FileStore(root, redact=None, file_ops=NoSyncOps())
    async with tether.Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
        before = {
            "tasks": len(asyncio.all_tasks()),
            "fds": len(os.listdir("/proc/self/fd")),
            "rss_kib": _rss_kib(),
        }
        for n in range(runs):
            await sup.start(f"run-{n:05d}", "check")
        for n in range(runs):
            status = await sup.wait(f"run-{n:05d}", timeout=600)
            assert status is tether.RunStatus.SLEEPING, status
        after = {
            "tasks": len(asyncio.all_tasks()),
            "fds": len(os.listdir("/proc/self/fd")),
            "rss_kib": _rss_kib(),
        }
    return {
        "runs": runs,
        "before": before,
        "after": after,
        "tasks_per_run": (after["tasks"] - before["tasks"]) / runs,
        "fds_per_run": (after["fds"] - before["fds"]) / runs,
        "rss_kib_per_run": (after["rss_kib"] - before["rss_kib"]) / runs,
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tether-sleeping-") as tmp:
        result = anyio.run(measure, Path(tmp), args.runs)
        result["machine"] = machine_info(Path(tmp))
    print(
        f"{args.runs} sleeping runs: {result['tasks_per_run']:.4f} tasks and "
        f"{result['fds_per_run']:.4f} descriptors per run, "
        f"{result['rss_kib_per_run']:.2f} KiB of memory per run"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
