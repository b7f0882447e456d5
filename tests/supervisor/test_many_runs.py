"""Many runs in one process, restarts after a broken journal, the status stream, limits."""

from __future__ import annotations

import errno
import logging
import pathlib
import subprocess
import sys
from collections import Counter

import anyio
import pytest

import tether
from tether.journal import Resumed, verify_file
from tether.supervisor import RunStatus, StatusChange, Supervisor
from tether.testing import FaultyFileOps

from ._helpers import delivery_app, read_events

use = tether.ScriptedModel.tool_use


@pytest.mark.slow
async def test_a_thousand_runs_in_one_process(tmp_path: pathlib.Path) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    ids = [f"run-{i:04d}" for i in range(1000)]
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        async with anyio.create_task_group() as tg:
            for run_id in ids:
                tg.start_soon(sup.start, run_id, f"item {run_id}")
        statuses = [await sup.wait(run_id, timeout=120) for run_id in ids]
    assert Counter(statuses) == {RunStatus.DONE: 1000}
    assert ledger == dict.fromkeys((f"{r}:toolu_2" for r in ids), 1)
    assert model.calls == 3000
    for run_id in ids:
        verify_file(str(tmp_path / "runs" / f"{run_id}.journal"))


async def test_a_run_whose_journal_breaks_is_restarted_and_completes(
    tmp_path: pathlib.Path,
) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    faults = FaultyFileOps()
    store = tether.FileStore(tmp_path, file_ops=faults)
    async with Supervisor(store, model=model, tools=tools, restart_backoff=0.01) as sup:
        faults.fail("fdatasync", errno.EIO, after=3)  # one append fails: the handle is dead
        await sup.start("run-1", "item")
        assert await sup.wait("run-1", timeout=10) is RunStatus.DONE
        view = await sup.inspect("run-1")
    assert view.restarts == 0  # resumed after the store failed: not the run's restart
    assert view.final_text == "delivered item"
    # The failed sync was the delivery's result: that group was never acknowledged, so it is
    # cut off again and the delivery runs once more, under the same idempotency key, for the
    # receiver to recognise.
    assert ledger == Counter({"run-1:toolu_2": 2})
    # The store failed, not the run: the restart says why and is not counted against it.
    (resumed,) = [e for e in await read_events(tmp_path, "run-1") if isinstance(e, Resumed)]
    assert not resumed.charged
    assert resumed.cause.startswith("store: JournalBrokenError")
    assert "Input/output error" in resumed.cause


async def test_a_store_that_keeps_failing_never_fails_the_run(tmp_path: pathlib.Path) -> None:
    """Eight failed syncs in a row (a disk that errs for a while): the run waits them out."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    faults = FaultyFileOps()
    store = tether.FileStore(tmp_path, file_ops=faults)
    async with Supervisor(
        store, model=model, tools=tools, restart_backoff=0.001, max_restarts=0
    ) as sup:
        faults.fail("fdatasync", errno.EIO, after=2, times=8)
        await sup.start("run-1", "item")
        assert await sup.wait("run-1", timeout=30) is RunStatus.DONE
    events = await read_events(tmp_path, "run-1")
    resumes = [e for e in events if isinstance(e, Resumed)]
    assert resumes
    assert not any(r.charged for r in resumes)
    assert set(ledger) == {"run-1:toolu_2"}  # however often it ran, under one key


async def test_a_run_created_elsewhere_starts_with_nothing_spent(tmp_path: pathlib.Path) -> None:
    """A web handler creates the run (and leaves at once); a worker drives it first."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as web:
        await web.start("run-1", "item")  # and the handler's process stops right away
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, max_restarts=0
    ) as worker:
        assert await worker.wait("run-1", timeout=10) is RunStatus.DONE
    for resumed in [e for e in await read_events(tmp_path, "run-1") if isinstance(e, Resumed)]:
        assert not resumed.charged


async def test_status_changes_stream_to_observers(tmp_path: pathlib.Path) -> None:
    model, tools = delivery_app(Counter())
    seen: list[StatusChange] = []
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:

        async def watch() -> None:
            async for change in sup.events():
                seen.append(change)
                if change.status is RunStatus.DONE:
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await anyio.sleep(0)
            await sup.start("run-1", "item")
    assert [(c.run_id, c.status) for c in seen] == [
        ("run-1", RunStatus.RUNNING),
        ("run-1", RunStatus.DONE),
    ]


async def test_max_active_runs_bounds_concurrency(tmp_path: pathlib.Path) -> None:
    active = 0
    peak = 0
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def work() -> str:
        """Do some work."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await anyio.sleep(0.02)
        active -= 1
        return "ok"

    model = tether.ScriptedModel([[use("toolu_1", "work", {})], "done"])
    store = tether.FileStore(tmp_path)
    async with Supervisor(store, model=model, tools=tools, max_active_runs=3) as sup:
        for i in range(12):
            await sup.start(f"run-{i}", "go")
        for i in range(12):
            assert await sup.wait(f"run-{i}", timeout=20) is RunStatus.DONE
    assert peak == 3


async def test_a_parked_run_continues_when_another_process_records_a_decision(
    tmp_path: pathlib.Path,
) -> None:
    tools = tether.ToolRegistry()
    sent: list[str] = []

    @tools.tool(policy="idempotency_key", approval=True)
    async def send(text: str, ctx: tether.ToolContext) -> str:
        """Send a text."""
        sent.append(ctx.idempotency_key)
        return "sent"

    model = tether.ScriptedModel([[use("toolu_1", "send", {"text": "hi"})], "done"])
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, sweep_interval=0.05
    ) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=10) is RunStatus.WAITING_FOR_APPROVAL
        # Another process (here another store on the same root) records the decision.
        async with tether.FileStore(tmp_path) as other:
            journal = await other.open("run-1")
            async with journal:
                await journal.append(
                    [tether.journal.Decision(call_id="toolu_1", approved=True, by="priya")]
                )
        with anyio.fail_after(10):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.05)
    assert sent == ["run-1:toolu_1"]


@pytest.mark.slow
def test_five_thousand_starts_fit_in_256_descriptors(tmp_path: pathlib.Path) -> None:
    """A run waiting for a slot holds no descriptor, so starting many at once cannot run out."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.supervisor._many_starts_child", str(tmp_path), "5000"],
        cwd=pathlib.Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "done 5000"


async def test_a_supervisor_says_what_it_found_in_one_line(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not one line per finished run at every start (2,000 lines for 2,000 runs)."""
    caplog.set_level(logging.INFO, logger="tether.supervisor")
    model, tools = delivery_app(Counter())
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert [r.getMessage() for r in caplog.records] == [f"serving {tmp_path}: no runs yet"]
        for n in range(5):
            await sup.start(f"run-{n}", "item")
        for n in range(5):
            assert await sup.wait(f"run-{n}", timeout=10) is RunStatus.DONE
    caplog.clear()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools):
        pass
    assert [r.getMessage() for r in caplog.records] == [f"serving {tmp_path}: 5 runs (5 done)"]
