"""A poisoned call stays with its run: it never ends the process, or the runs beside it.

In one process: a tool that raises ``SystemExit``, ``KeyboardInterrupt`` or a ``CancelledError``
nobody asked for is that call's error result. Across processes: a tool that kills its own
process every time is isolated (its run takes its steps alone) and, once its crash loop passes
the limit, parked as ``needs_attention`` naming the call, while the other runs of the same
store finish.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Escalated, FileStore, Resumed, RunStarted
from tether.models import Message
from tether.supervisor import RunState, RunStatus, Supervisor, fold
from tether.supervisor._loop import Runtime, build_manifest

from . import _poison_app
from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
REPO = pathlib.Path(__file__).resolve().parents[2]
WORKER = (sys.executable, "-m", "tether.cli", "worker")


def poison_tools(done: list[str]) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def work(item: str) -> str:
        """Do some work."""
        await anyio.sleep(0.01)
        done.append(item)
        return f"worked on {item}"

    @tools.tool(policy="rerun")
    async def exit_process(code: int) -> str:
        """A library that calls sys.exit."""
        raise SystemExit(code)

    @tools.tool(policy="rerun")
    async def interrupt() -> str:
        """A library that raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    @tools.tool(policy="rerun")
    async def leak_cancel() -> str:
        """A library that leaks a CancelledError nobody asked for."""
        raise asyncio.CancelledError

    return tools


def answer(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    item = str(messages[0]["content"])
    if step == 1:
        return f"finished {item}"
    if item == "exit":
        return [use("toolu_x", "exit_process", {"code": 3})]
    if item == "interrupt":
        return [use("toolu_x", "interrupt", {})]
    if item == "cancel":
        return [use("toolu_x", "leak_cancel", {})]
    return [use("toolu_x", "work", {"item": item})]


async def test_base_exceptions_from_tools_are_their_calls_errors(tmp_path: pathlib.Path) -> None:
    done: list[str] = []
    model = tether.ScriptedModel(answer)
    innocents = [f"item-{n}" for n in range(20)]
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=poison_tools(done)) as sup:
        for item in ["exit", *innocents[:10], "interrupt", *innocents[10:], "cancel"]:
            await sup.start(f"run-{item}", item)
        for item in ["exit", "interrupt", "cancel", *innocents]:
            assert await sup.wait(f"run-{item}", timeout=WAIT) is RunStatus.DONE, item
        # The supervisor is alive and well: it still takes new runs.
        await sup.start("run-late", "late")
        assert await sup.wait("run-late", timeout=WAIT) is RunStatus.DONE

    assert sorted(done) == sorted([*innocents, "late"])
    expected = {
        "exit": "SystemExit: 3",
        "interrupt": "KeyboardInterrupt: ",
        "cancel": "the tool raised CancelledError (nothing cancelled it)",
    }
    for item, text in expected.items():
        result = result_of(await read_events(tmp_path, f"run-{item}"), "toolu_x")
        assert (result.ok, result.content) == (False, text)


async def _create(root: pathlib.Path, items: list[str]) -> None:
    async with FileStore(root) as store:
        rt = Runtime(
            model=_poison_app.make_model(), tools=_poison_app.tools, load_blob=store.load_blob
        )
        manifest = build_manifest(rt, system=None, app_version="")
        for item in items:
            started = RunStarted(
                run_id=f"run-{item}",
                manifest=manifest,
                messages=[{"role": "user", "content": item}],
            )
            journal = await store.create(f"run-{item}", [started])
            await journal.aclose()


def _worker_until_it_dies_or_rests(root: pathlib.Path, log: pathlib.Path) -> int:
    """One worker process: returns its exit code (-9 when the poison killed it)."""
    env = {**os.environ, "TETHER_TEST_LEDGER": str(root.parent / "ledger")}
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [*WORKER, "--root", str(root), "--quiet", "--app", "tests.supervisor._poison_app:app"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        for _ in range(300):  # up to 30 s
            code = proc.poll()
            if code is not None:
                return code
            if _all_rest(root):
                proc.send_signal(signal.SIGTERM)
                return proc.wait(30)
            anyio.run(anyio.sleep, 0.1)
        raise AssertionError("the worker neither died nor let the runs rest")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _all_rest(root: pathlib.Path) -> bool:
    async def check() -> bool:
        async with FileStore(root) as store:
            for run_id in await store.list_runs():
                state = fold(await store.read(run_id))
                status = tether.supervisor.run_status(state, 0.0).status
                if status is RunStatus.RUNNING:
                    return False
        return True

    return anyio.run(check)


def _longest_streak(events: list[Any]) -> int:
    """The most interruptions in a row without progress the run ever had."""
    state, longest = RunState(), 0
    for event in events:
        state.apply(event)
        longest = max(longest, state.interruptions)
    return longest


@pytest.mark.slow
def test_a_tool_that_kills_its_process_is_parked_and_the_others_finish(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "store"
    items = ["poison", *[f"good-{n}" for n in range(4)]]
    anyio.run(_create, root, items)
    log = tmp_path / "workers.log"
    codes: list[int] = []
    while not _all_rest(root):
        codes.append(_worker_until_it_dies_or_rests(root, log))
        assert len(codes) <= 8, (codes, log.read_text())
    # A handful of process starts: the poison killed each until its loop passed the limit.
    assert codes[-1] == 0
    assert codes[:-1] == [-signal.SIGKILL] * (len(codes) - 1)
    assert 4 <= len(codes) <= 7, codes

    async def check() -> None:
        poison = await read_events(root, "run-poison")
        (escalated,) = of_type(poison, Escalated)
        assert escalated.call_id == "toolu_boom"
        assert "while explode was running" in escalated.reason
        assert "stopped 4 times in a row (limit 3)" in escalated.reason
        state = fold(poison)
        assert tether.supervisor.run_status(state, 0.0).status is RunStatus.NEEDS_ATTENTION
        for n in range(4):
            events = await read_events(root, f"run-good-{n}")
            state = fold(events)
            assert state.finished is not None
            assert state.finished.status == "done"
            # The first two deaths cannot tell the poison from the runs beside it (each was
            # running a tool), so an innocent may be charged twice in a row; from then on
            # suspects take their steps alone and it is never charged again without progress.
            assert _longest_streak(events) <= 2, of_type(events, Resumed)

    anyio.run(check)
    ledger = (tmp_path / "ledger").read_text().splitlines()
    delivered = [json.loads(line)["key"] for line in ledger]
    assert sorted(delivered) == sorted(f"run-good-{n}:toolu_2" for n in range(4))
