"""A long-lived supervisor serving tens of thousands of runs: does it grow with every run?

Run ``python bench/soak.py [--runs 30000] [--clients 32] [--warmup 5000] [--out FILE]``.

One ``Supervisor`` over one ``FileStore`` (syncs on) serves ``--runs`` runs, ``--clients`` at a
time, the way a web service does: each client starts a run, waits for it to end, and starts
the next. Every run calls one tool and then answers (five journal records). Every ``--every``
finished runs the process is sampled after a full collection: its RSS, its gc-tracked objects
and the supervisor's board (entries kept per run).

Two cases, each in a fresh process: ``sweeping`` looks at the store every second, as a worker
does (a ``FileStore``'s sweep lists every journal in the store, finished or not, so it costs
a little per journal while the journal is in the store; ``tether gc`` bounds that), and
``alone`` does not sweep, so what it keeps is the supervisor's own.

Reported per case: RSS at the end over RSS after ``--warmup`` runs (the warm-up fills the
allocator's arenas, the caches, the interpreter's own pools), the bytes of RSS and the
gc-tracked objects each run finished after the warm-up left behind, and the board's entries
at the end. A finished run nobody waits on should cost the supervisor nothing.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import parser, say, workspace, write_results

import tether
from tether.models import ContentBlock, Message


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sample(sup: tether.Supervisor, finished: int, started: float) -> dict[str, Any]:
    gc.collect()
    return {
        "runs": finished,
        "seconds": round(time.perf_counter() - started, 2),
        "rss": rss_bytes(),
        "gc_objects": len(gc.get_objects()),
        "board": len(sup._board.runs),  # the bench is about it
    }


CASES = {"sweeping": 1.0, "alone": None}
"""Each case's ``sweep_interval``."""


def new_supervisor(store: tether.FileStore, sweep: float | None = 1.0) -> tether.Supervisor:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def look(item: str) -> dict[str, Any]:
        """Look an item up."""
        return {"item": item, "found": True}

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        if len(messages) == 1:
            return [tether.ScriptedModel.tool_use("toolu_1", "look", {"item": "x"})]
        return "found it"

    model = tether.ScriptedModel(script, name="soak")
    return tether.Supervisor(store, model=model, tools=tools, sweep_interval=sweep)


async def soak(
    root: Path, runs: int, clients: int, every: int, sweep: float | None
) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = []
    store = tether.FileStore(root, redact=None)
    async with new_supervisor(store, sweep) as sup:
        began = time.perf_counter()
        next_id = 0
        finished = 0
        samples.append(sample(sup, 0, began))

        async def client() -> None:
            nonlocal next_id, finished
            while next_id < runs:
                run_id = f"run-{next_id:07d}"
                next_id += 1
                await sup.start(run_id, "look x up")
                status = await sup.wait(run_id, timeout=600)
                if status is not tether.RunStatus.DONE:
                    raise RuntimeError(f"{run_id} ended {status.value}")
                finished += 1
                if finished % every == 0:
                    samples.append(sample(sup, finished, began))
                    say(
                        f"{finished} runs: RSS {samples[-1]['rss'] / 2**20:.1f} MiB, "
                        f"{samples[-1]['gc_objects']} objects, board {samples[-1]['board']}"
                    )

        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(client)
    return samples


def summarize(samples: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    warm = next(s for s in samples if s["runs"] >= warmup)
    end = samples[-1]
    runs = end["runs"] - warm["runs"]
    return {
        "warm_runs": warm["runs"],
        "end_runs": end["runs"],
        "rss_ratio": end["rss"] / warm["rss"],
        "rss_bytes_per_run": (end["rss"] - warm["rss"]) / runs,
        "gc_objects_per_run": (end["gc_objects"] - warm["gc_objects"]) / runs,
        "board_at_end": end["board"],
        "runs_per_second": end["runs"] / end["seconds"],
    }


def spawn(root: Path, case: str, args: Any) -> list[dict[str, Any]]:
    """Run one case in a fresh process (this script with ``--one``); its samples."""
    numbers = [str(n) for n in (args.runs, args.clients, args.every)]
    out = subprocess.run(
        [sys.executable, __file__, "--one", case, str(root / case), *numbers],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    samples: list[dict[str, Any]] = json.loads(out.stdout.splitlines()[-1])
    return samples


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--one"]:
        case, root = sys.argv[2], Path(sys.argv[3])
        runs, clients, every = (int(n) for n in sys.argv[4:7])
        print(json.dumps(anyio.run(soak, root, runs, clients, every, CASES[case])))
        return 0
    p = parser(__doc__, out="soak.json", dir_help="where to write (default: near the checkout)")
    p.add_argument("--runs", type=int, default=30_000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--warmup", type=int, default=5_000)
    p.add_argument("--every", type=int, default=1_000)
    p.add_argument("--case", choices=list(CASES), action="append", help="only this case")
    args = p.parse_args(argv)
    if not 0 < args.warmup < args.runs:
        p.error("--warmup must be between 0 and --runs")
    report: dict[str, Any] = {"runs": args.runs, "clients": args.clients, "cases": {}}
    with workspace(args.dir, "tether-soak-") as (root, machine):
        for case in args.case or CASES:
            say(f"{case}:")
            samples = spawn(root, case, args)
            summary = summarize(samples, args.warmup)
            report["cases"][case] = {"summary": summary, "samples": samples}
            print(
                f"{case}: {summary['end_runs']} runs through one supervisor: RSS at the end "
                f"{summary['rss_ratio']:.3f}x RSS after {summary['warm_runs']}; "
                f"{summary['rss_bytes_per_run']:.0f} bytes and "
                f"{summary['gc_objects_per_run']:.3f} gc objects per run since; "
                f"{summary['board_at_end']} board entries at the end "
                f"({summary['runs_per_second']:.0f} runs/s)"
            )
    report["machine"] = machine
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
