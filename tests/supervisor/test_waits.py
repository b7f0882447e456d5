"""Waiting on the world: durable timers (a call that sleeps) and external events (signals).

A call that sleeps or waits for an event parks its run (status ``waiting``) with no task; the
wake time is journaled, so a restart never wakes it early, and any process on the store
continues it when the time comes.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Resumed, Signal, Waiting
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
RUN = "run-1"
REPO = pathlib.Path(__file__).resolve().parents[2]
SIGNAL = (sys.executable, "-m", "tether.cli", "signal")


def waiting_tools(
    seconds: float = 0.3, timeout: float | None = None, **options: Any
) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def check_later(order: str) -> tether.Wait:
        """Check an order again in a while."""
        return tether.sleep_for(seconds, result=f"{order} checked again")

    @tools.tool(policy="rerun")
    async def await_payment(order: str) -> tether.Wait:
        """Wait for the payment webhook."""
        return tether.wait_for(f"payment.{order}", timeout=timeout, **options)

    return tools


def script(tool: str) -> tether.ScriptedModel:
    return tether.ScriptedModel([[use("toolu_1", tool, {"order": "o-1"})], "all settled"])


async def test_a_call_that_sleeps_parks_the_run_and_wakes_on_time(tmp_path: pathlib.Path) -> None:
    async with Supervisor(
        tether.FileStore(tmp_path), model=script("check_later"), tools=waiting_tools(0.4)
    ) as sup:
        started = time.time()
        await sup.start(RUN, "check o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
        view = await sup.inspect(RUN)
        assert "check_later (toolu_1) sleeping until" in view.reason
        tasks = len(asyncio.all_tasks())
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
        woke = time.time()
    assert woke - started >= 0.4  # never early
    events = await read_events(tmp_path, RUN)
    (waiting,) = of_type(events, Waiting)
    assert waiting.until == pytest.approx(waiting.at + 0.4, abs=0.05)
    assert result_of(events, "toolu_1").content == "o-1 checked again"
    assert tasks < 20


async def _until(sup: Supervisor, want: RunStatus) -> RunStatus:
    with anyio.fail_after(WAIT):
        while (status := (await sup.inspect(RUN)).status) is not want:
            await anyio.sleep(0.02)
    return status


@pytest.mark.parametrize("when", ["before", "during"])
async def test_a_signal_before_or_during_the_wait_is_the_calls_result(
    tmp_path: pathlib.Path, when: str
) -> None:
    model = tether.ScriptedModel(
        [
            [use("toolu_0", "check_later", {"order": "o-1"})],
            [use("toolu_1", "await_payment", {"order": "o-1"})],
            "paid",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=waiting_tools(0.3)) as sup:
        await sup.start(RUN, "settle o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING  # the first sleep
        if when == "before":  # delivered while the run sleeps, before anything waits for it
            await sup.signal(RUN, "payment.o-1", {"amount": 40}, signal_id="evt_1")
        await anyio.sleep(0.4)
        if when == "during":
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
            view = await sup.inspect(RUN)
            assert "await_payment (toolu_1) waiting for event payment.o-1" in view.reason
            await sup.signal(RUN, "payment.o-1", {"amount": 40}, signal_id="evt_1")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    result = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert (result.ok, result.content, result.signal_id) == (True, {"amount": 40}, "evt_1")


async def test_a_signal_delivered_twice_counts_once(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel(
        [
            [use("toolu_1", "await_payment", {"order": "o-1"})],
            [use("toolu_2", "await_payment", {"order": "o-1"})],
            "paid",
        ]
    )
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=waiting_tools(timeout=0.5)
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
        for _ in range(2):  # the webhook retried its delivery
            await sup.signal(RUN, "payment.o-1", "paid", signal_id="evt_1")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    assert result_of(events, "toolu_1").content == "paid"
    second = result_of(events, "toolu_2")  # the duplicate gave it nothing: it timed out
    assert not second.ok
    assert second.content == "no 'payment.o-1' event within 0.5 s"
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt_1"]  # recorded once


@pytest.mark.parametrize(
    ("options", "ok", "content"),
    [
        ({}, False, "no 'payment.o-1' event within 0.2 s"),
        ({"on_timeout": "result", "result": "assume unpaid"}, True, "assume unpaid"),
        ({"on_timeout": "error", "result": "payment never came"}, False, "payment never came"),
    ],
)
async def test_a_wait_past_its_timeout_takes_its_declared_outcome(
    tmp_path: pathlib.Path, options: dict[str, Any], ok: bool, content: str
) -> None:
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=script("await_payment"),
        tools=waiting_tools(timeout=0.2, **options),
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    result = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert (result.ok, result.content) == (ok, content)


async def test_the_sleep_tool_lets_the_model_wait_within_a_maximum(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()
    tools.add_sleep_tool(max_seconds=1)
    model = tether.ScriptedModel(
        [
            [use("toolu_1", "sleep", {"seconds": 3600, "reason": "too long"})],
            [use("toolu_2", "sleep", {"seconds": 0.2, "reason": "let the refund settle"})],
            "refund settled",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "refund")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    refused = result_of(events, "toolu_1")
    assert not refused.ok
    assert "seconds must be between 0 and 1" in refused.content
    assert result_of(events, "toolu_2").content == "slept 0.2 s (let the refund settle)"


def _child(root: pathlib.Path, mode: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.supervisor._wait_child", str(root), mode],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start_and_kill(root: pathlib.Path) -> None:
    """Start the run in a child, let it park in its sleep, kill the child with SIGKILL."""
    first = _child(root, "start")
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "waiting"
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL


def _resume(root: pathlib.Path) -> float:
    """Serve the store in a child until the run is done; the sleep's length, from its journal."""
    worker = _child(root, "resume")
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    last = out.strip().splitlines()[-1]
    assert last.startswith("done after "), out
    return float(last.split()[-1])


@pytest.mark.slow
def test_a_sleep_outlives_its_process_and_wakes_in_a_later_one(tmp_path: pathlib.Path) -> None:
    """SIGKILLed while the run sleeps 2 s: a worker started at once does not wake it early;
    with no process alive at the wake time, a worker started later goes on at once."""
    _start_and_kill(tmp_path / "early")
    assert _resume(tmp_path / "early") >= 2.0  # it waited for the time, not for the restart

    _start_and_kill(tmp_path / "late")
    time.sleep(2.2)  # the wake time passes with nobody there
    began = time.monotonic()
    slept = _resume(tmp_path / "late")
    assert time.monotonic() - began < 2.0  # a process start, not another sleep
    assert slept >= 2.0

    async def result() -> Any:
        return result_of(await read_events(tmp_path / "late" / "store", RUN), "toolu_1")

    assert anyio.run(result).content == "o-1 checked again"


async def test_a_signal_to_a_run_another_process_holds_is_queued_and_recorded(
    tmp_path: pathlib.Path,
) -> None:
    """`tether signal` while a worker holds the run (a slow tool runs beside the wait): the
    signal goes to the run's inbox and the holder records it at its next pause."""
    slow_done = anyio.Event()
    tools = waiting_tools()

    @tools.tool(policy="rerun")
    async def slow_report(order: str) -> str:
        """Write a long report."""
        await slow_done.wait()
        return "report written"

    model = tether.ScriptedModel(
        [
            [
                use("toolu_1", "await_payment", {"order": "o-1"}),
                use("toolu_2", "slow_report", {"order": "o-1"}),
            ],
            "settled",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "settle o-1")
        with anyio.fail_after(WAIT):
            while not of_type(await read_events(tmp_path, RUN), Waiting):
                await anyio.sleep(0.02)
        argv = [*SIGNAL, "--root", str(tmp_path), RUN, "payment.o-1", "--id", "evt_9"]
        cli = await anyio.run_process([*argv, "--data", '{"amount": 40}'], cwd=REPO, check=False)
        assert cli.returncode == 0, cli.stderr
        assert b"queued: another process is advancing the run" in cli.stdout
        slow_done.set()
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    assert result_of(events, "toolu_1").content == {"amount": 40}
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt_9"]


@pytest.mark.parametrize("wait", ["sleep", "signal"])
async def test_a_run_left_waiting_by_a_clean_stop_resumes_with_no_restart(
    tmp_path: pathlib.Path, wait: str
) -> None:
    """The supervisor that parked it exits cleanly; a later one continues it when its time
    comes or its signal arrives. Its last owner stopped at a rest: no ``resumed`` record, no
    restart counted, as for a run woken by an approval."""
    tool = "check_later" if wait == "sleep" else "await_payment"
    tools = waiting_tools(0.2)
    async with Supervisor(tether.FileStore(tmp_path), model=script(tool), tools=tools) as sup:
        await sup.start(RUN, "check o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
    if wait == "signal":  # a webhook's tether signal, with no supervisor of its own
        argv = [*SIGNAL, "--root", str(tmp_path), RUN, "payment.o-1", "--data", "{}"]
        cli = await anyio.run_process(argv, cwd=REPO, check=False)
        assert cli.returncode == 0, cli.stderr
    else:
        await anyio.sleep(0.25)
    async with Supervisor(tether.FileStore(tmp_path), model=script(tool), tools=tools) as later:
        assert await _until(later, RunStatus.DONE) is RunStatus.DONE
        assert (await later.inspect(RUN)).restarts == 0
    assert of_type(await read_events(tmp_path, RUN), Resumed) == []
