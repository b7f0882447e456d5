"""The web console over a store of 10,000 runs: server time per page, beside ``tether runs``.

Run ``python bench/console.py [--runs 10000] [--repeat 15] [--out FILE]`` (about a minute).

Builds a directory store of N runs (syncs switched off through the ``FileOps`` seam, so the
build is quick; reading is what is measured): most done, a tenth parked for approval, some
failed. Then, in one process, it times ``tether runs --root DIR`` (which folds every journal
each time) and the console's runs page, inbox and ``GET /api/runs`` through the ASGI app
itself (server time, no network): the first request (nothing cached), later ones (every
summary cached by the run's version), and one after a run changed (that run read again).
Cases take turns, in an order reversed on every other round; medians are reported, and the
ratios of ``tether runs`` to each page.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from _harness import alternate, parser, say, workspace, write_results
from _nosync import NoSyncOps

import tether
import tether.web
from tether.cli import main as cli
from tether.journal import (
    Decision,
    Manifest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolPin,
    ToolResult,
    ToolStarted,
    Usage,
)

TOKEN = "bench-token-0123456789abcdef"
PINS = [
    ToolPin(name="lookup", version="1", schema_hash="x"),
    ToolPin(name="issue_refund", version="1", schema_hash="y", approval=True),
]


def _events(n: int) -> list[Any]:
    run_id = f"run-{n:05d}"
    use = tether.ScriptedModel.tool_use
    started = RunStarted(
        run_id=run_id,
        manifest=Manifest(model="scripted", tools=PINS),
        messages=[{"role": "user", "content": f"ticket {n}: the customer asks for a refund"}],
    )
    usage = Usage(input_tokens=900, output_tokens=60)
    look = ModelResponse(
        message={"role": "assistant", "content": [use("c1", "lookup", {"order": f"o-{n}"})]},
        usage=usage,
    )
    events: list[Any] = [
        started,
        look,
        ToolStarted(call_id="c1", name="lookup"),
        ToolResult(call_id="c1", ok=True, content={"order": f"o-{n}", "total": 40}),
    ]
    ask = ModelResponse(
        message={"role": "assistant", "content": [use("c2", "issue_refund", {"order": f"o-{n}"})]},
        usage=usage,
    )
    events.append(ask)
    if n % 10 == 0:
        return events  # parked: waiting for approval
    events += [
        Decision(call_id="c2", approved=True, by="priya"),
        ToolStarted(call_id="c2", name="issue_refund"),
        ToolResult(call_id="c2", ok=True, content="refunded"),
        ModelResponse(message={"role": "assistant", "content": "refunded"}, usage=usage),
    ]
    status = "failed" if n % 10 == 1 else "done"
    return [*events, RunFinished(status=status, reason="budget" if status == "failed" else "")]


async def build(root: Path, runs: int) -> None:
    async with tether.FileStore(root, redact=None, file_ops=NoSyncOps()) as store:
        limiter = anyio.CapacityLimiter(32)

        async def one(n: int) -> None:
            async with limiter:
                journal = await store.create(f"run-{n:05d}", _events(n))
                await journal.aclose()

        async with anyio.create_task_group() as tg:
            for n in range(runs):
                tg.start_soon(one, n)


def _tether_runs(root: Path) -> float:
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        assert cli(["runs", "--root", str(root)]) == 0
    return time.perf_counter() - start


async def measure(root: Path, repeat: int) -> dict[str, Any]:
    store = tether.FileStore(root)
    app = tether.web.app(store, tokens={TOKEN: "bench"})
    headers = {"authorization": f"Bearer {TOKEN}"}
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://b", headers=headers) as c:
        await c.post("/login", data={"token": TOKEN})

        async def timed(path: str) -> float:
            start = time.perf_counter()
            response = await c.get(path)
            took = time.perf_counter() - start
            assert response.status_code == 200, (path, response.status_code)
            return took

        first = {"runs page": await timed("/")}
        await asyncio.sleep(0.2)  # past the window in which fresh versions are not trusted
        await timed("/")
        listing = app.state.console.listing
        listing.fresh_for = 0  # every request looks at the store
        cases = {
            "tether runs": lambda: anyio.to_thread.run_sync(_tether_runs, root),
            "runs page": lambda: timed("/"),
            "runs page, status filter": lambda: timed("/?status=waiting_for_approval"),
            "inbox": lambda: timed("/inbox"),
            "GET /api/runs": lambda: timed("/api/runs"),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for r in range(repeat):
            for name in alternate(list(cases), r):
                times[name].append(await cases[name]())
            say(f"round {r + 1}/{repeat}")
        reads = listing.reads
        changed: list[float] = []
        for n in range(5):
            async with tether.FileStore(root) as writer:
                j = await writer.open(f"run-{n * 10 + 2:05d}")
                async with j:
                    await j.append([tether.journal.Signal(name="x", signal_id=f"s{n}")])
            changed.append(await timed("/"))
        read_again = listing.reads - reads
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "first_request_s": first,
        "median_s": medians,
        "after_one_run_changed_s": statistics.median(changed),
        "runs_read_for_five_changes": read_again,
        "ratios": {
            f"tether runs / {name}": medians["tether runs"] / medians[name]
            for name in medians
            if name != "tether runs"
        },
        "tries": times,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(
        __doc__,
        out="console.json",
        dir_help="directory for the store (default: next to the checkout)",
    )
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    with workspace(args.dir, "tether-console-", packages=["starlette", "uvicorn", "jinja2"]) as (
        root,
        info,
    ):
        say(f"building {args.runs} runs in {root}")
        anyio.run(build, root, args.runs)
        result = anyio.run(measure, root, args.repeat)
    report = {"machine": info, "runs": args.runs, "repeat": args.repeat, **result}
    m = result["median_s"]
    print(f"{args.runs} runs; medians of {args.repeat}, server time per request")
    for name, seconds in m.items():
        print(f"  {name:28} {seconds * 1000:9.1f} ms")
    cold = result["first_request_s"]["runs page"]
    print(f"  first runs page (nothing cached) {cold * 1000:9.1f} ms")
    print(
        f"  runs page after a run changed  {result['after_one_run_changed_s'] * 1000:9.1f} ms "
        f"({result['runs_read_for_five_changes']} journals read for 5 changes)"
    )
    for name, ratio in result["ratios"].items():
        print(f"  {name}: {ratio:.1f}x")
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
