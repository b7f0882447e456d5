"""What a command costs before it does anything, and ``tether runs`` over a store of finished runs.

Run ``python bench/startup.py [--runs 2000] [--repeat 5] [--before SRC] [--dir DIR]``.

Each case is a fresh process, and what is reported is its CPU time (user + system, from the
kernel's accounting of the child): ``python -c "import tether"``, and ``tether runs --root
DIR`` over a directory store of ``--runs`` finished runs (each a model answer, a tool call and
its result, the final answer), the first time (nothing kept yet: every journal folded) and
again (the finished runs' summaries kept in ``DIR/summaries.cache``). With ``--before SRC``
(the ``src`` of another checkout of tether) every case also runs with that first on
``PYTHONPATH`` (against a copy of the store, so that neither sees the other's file), taking
turns, and the report gives each case's ratio to its ``@before``. Medians of ``--repeat``
tries, the min-max beside them.

Every process runs with its bytecode cached, as an installed package's is: each side has its
own ``PYTHONPYCACHEPREFIX`` in the workspace (so nothing is written beside either checkout's
sources), filled by one untimed run of every case first, and ``PYTHONDONTWRITEBYTECODE`` is
cleared for it. (Without a cache, in an environment that sets ``PYTHONDONTWRITEBYTECODE``,
every process compiles tether's sources again: no installed tether does that.)
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from _harness import alternate, parser, say, workspace, write_results
from _nosync import NoSyncOps

import tether
from tether.journal import (
    Manifest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolPin,
    ToolResult,
    ToolStarted,
    Usage,
)

CACHE = "summaries.cache"


def _events(n: int) -> list[Any]:
    use = tether.ScriptedModel.tool_use
    usage = Usage(input_tokens=900, output_tokens=60)
    return [
        RunStarted(
            run_id=f"run-{n:05d}",
            manifest=Manifest(
                model="scripted", tools=[ToolPin(name="lookup", version="1", schema_hash="x")]
            ),
            messages=[{"role": "user", "content": f"ticket {n}: where is my order?"}],
        ),
        ModelResponse(
            message={"role": "assistant", "content": [use("c1", "lookup", {"order": f"o-{n}"})]},
            usage=usage,
        ),
        ToolStarted(call_id="c1", name="lookup"),
        ToolResult(call_id="c1", ok=True, content={"order": f"o-{n}", "status": "shipped"}),
        ModelResponse(message={"role": "assistant", "content": "it has shipped"}, usage=usage),
        RunFinished(status="done"),
    ]


async def build(root: Path, runs: int) -> None:
    async with tether.FileStore(root, redact=None, file_ops=NoSyncOps()) as store:
        limiter = anyio.CapacityLimiter(32)

        async def one(n: int) -> None:
            async with limiter:
                await (await store.create(f"run-{n:05d}", _events(n))).aclose()

        async with anyio.create_task_group() as tg:
            for n in range(runs):
                tg.start_soon(one, n)


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _environment(pycache: Path) -> dict[str, str]:
    """This process's environment, with bytecode cached in ``pycache`` (and written there)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, out="startup.json", dir_help="directory for the store")
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--before", type=Path, default=None, help="src of the tether to compare with")
    args = p.parse_args(argv)
    sides = ["now"] + (["before"] if args.before is not None else [])
    tries: dict[str, list[float]] = {}
    with workspace(args.dir, "tether-startup-") as (root, info):
        say(f"building {args.runs} finished runs in {root}")
        anyio.run(build, root / "now", args.runs)
        stores = {"now": root / "now"}
        if args.before is not None:
            shutil.copytree(root / "now", root / "before")
            stores["before"] = root / "before"
        envs = {side: _environment(root / f"pycache-{side}") for side in sides}
        if args.before is not None:
            envs["before"]["PYTHONPATH"] = str(args.before)
        cli = [sys.executable, "-m", "tether.cli", "runs", "--root"]

        def cases(store: Path) -> dict[str, list[str]]:
            return {
                "import tether": [sys.executable, "-c", "import tether"],
                "tether runs, first": [*cli, str(store)],
                "tether runs, again": [*cli, str(store)],
            }

        for side in sides:  # every module each side imports compiled once, untimed
            for command in cases(stores[side]).values():
                cpu_of(command, envs[side])
        for r in range(args.repeat):
            for side in alternate(sides, r):
                env, store = envs[side], stores[side]
                (store / CACHE).unlink(missing_ok=True)
                for name, command in cases(store).items():
                    tries.setdefault(f"{name}@{side}", []).append(cpu_of(command, env))
            say(f"round {r + 1}/{args.repeat}")
    report: dict[str, Any] = {"machine": info, "runs": args.runs, "cases": {}, "ratios": {}}
    print(f"{args.runs} finished runs; CPU seconds per process, medians of {args.repeat}")
    for key, ts in tries.items():
        report["cases"][key] = {"median_s": statistics.median(ts), "tries_s": ts}
        print(f"  {key:32} {statistics.median(ts):6.3f} s  ({min(ts):.3f}-{max(ts):.3f})")
    for key in tries:
        name, _, side = key.partition("@")
        if side == "now" and f"{name}@before" in tries:
            now, was = tries[key], tries[f"{name}@before"]
            ratio = statistics.median(now) / statistics.median(was)
            paired = [a / b for a, b in zip(now, was, strict=True)]
            report["ratios"][f"{name}: now / before"] = {
                "ratio": ratio,
                "paired_min": min(paired),
                "paired_max": max(paired),
            }
            print(f"  {name}: {ratio:.2f}x before (rounds {min(paired):.2f}-{max(paired):.2f})")
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
