"""The console's cached pages over 10,000 runs: process CPU per request, beside another tether.

Run ``python bench/console_cpu.py [--runs 10000] [--repeat 3] [--requests 9] [--before SRC]
[--dir DIR]`` (about three minutes with ``--before``).

Builds the store of ``bench/console.py`` (most runs done, a tenth waiting for approval, a
tenth failed), then, in a fresh child process per try, serves the console through its ASGI
app (no network), lets every summary be read and trusted, and times the CPU the process
spends (every thread: the looks at the store run on worker threads) on each of ``--requests``
requests per page, every request looking at the store anew (``fresh_for=0``). That is the
cost of a page when nothing changed, which is what a console's pages mostly are. With
``--before SRC`` (the ``src`` of another checkout of tether) every try also runs with that
first on ``PYTHONPATH``, taking turns in an order reversed on every other round, and the report
gives each page's ratio to its ``@before``, the ratio of medians and the min-max of the paired
tries. Each try reports its median request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _harness import alternate, parser, say, workspace, write_results

PAGES = ("/", "/?status=waiting_for_approval", "/inbox", "/api/runs")
SCRIPT = Path(__file__).resolve()


async def serve(root: Path, requests: int) -> dict[str, float]:
    """The median CPU seconds of ``requests`` requests of each page (in this process)."""
    import httpx2
    from console import TOKEN

    import tether
    import tether.web

    app = tether.web.app(tether.FileStore(root), tokens={TOKEN: "bench"})
    transport = httpx2.ASGITransport(app=app)
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(transport=transport, base_url="http://b", headers=headers) as c:
        await c.post("/login", data={"token": TOKEN})
        await c.get("/")  # every summary read
        await asyncio.sleep(0.2)  # past the window in which fresh versions are not trusted
        await c.get("/")
        app.state.console.listing.fresh_for = 0  # every request looks at the store
        out = {}
        for page in PAGES:
            spent = []
            for _ in range(requests):
                start = time.process_time()
                response = await c.get(page)
                spent.append(time.process_time() - start)
                assert response.status_code == 200, (page, response.status_code)
            out[page] = statistics.median(spent)
    return out


def _try(root: Path, requests: int, src: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    argv = [sys.executable, str(SCRIPT), "--child", str(root), str(requests)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"a try failed (exit {done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, out="console_cpu.json", dir_help="directory for the store")
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--requests", type=int, default=9)
    p.add_argument("--before", type=Path, default=None, help="src of the tether to compare with")
    p.add_argument("--child", nargs=2, metavar=("ROOT", "REQUESTS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        root, requests = Path(args.child[0]), int(args.child[1])
        print(json.dumps(anyio.run(serve, root, requests)))
        return 0
    from console import build

    kinds = ["now"] + (["before"] if args.before is not None else [])
    with workspace(args.dir, "tether-console-cpu-", packages=["starlette", "jinja2"]) as (
        root,
        info,
    ):
        say(f"building {args.runs} runs in {root}")
        anyio.run(build, root, args.runs)
        tries: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for r in range(args.repeat):
            for kind in alternate(kinds, r):
                src = args.before if kind == "before" else None
                tries[kind].append(_try(root, args.requests, src))
            say(f"round {r + 1}/{args.repeat}")
    medians = {
        k: {page: statistics.median(t[page] for t in ts) for page in PAGES}
        for k, ts in tries.items()
    }
    report: dict[str, Any] = {
        "machine": info,
        "runs": args.runs,
        "repeat": args.repeat,
        "requests": args.requests,
        "median_cpu_s": medians,
        "tries_cpu_s": tries,
    }
    print(f"{args.runs} runs; CPU per request, medians of {args.repeat} tries")
    for kind in kinds:
        for page in PAGES:
            print(f"  {page:32} {kind:7} {medians[kind][page] * 1000:7.1f} ms")
    if "before" in tries:
        ratios = {}
        for page in PAGES:
            paired = [a[page] / b[page] for a, b in zip(tries["now"], tries["before"], strict=True)]
            ratio = medians["now"][page] / medians["before"][page]
            ratios[page] = {"ratio": ratio, "min": min(paired), "max": max(paired)}
            print(f"  {page}: {ratio:.2f}x before (paired {min(paired):.2f}-{max(paired):.2f})")
        report["ratios"] = ratios
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
