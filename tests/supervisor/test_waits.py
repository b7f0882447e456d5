"""Waiting on the world: durable timers (a call that sleeps) and external events (signals).

A call that sleeps or waits for an event parks its run (status ``waiting``) with no task; the
wake time is journaled, so a restart never wakes it early, and any process on the store
continues it when the time comes.

Time is the subject here, so the supervisors run on a ``VirtualClock``: a test moves time
(``advance``) where something must happen before a wake time, and lets it jump (autojump)
where nothing must; an hour-long sleep takes milliseconds and no test waits for real time.
The processes killed during a sleep keep real processes and a real SIGKILL; their clocks are
virtual too (``_wait_child``).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Resumed, Signal, Waiting
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock
from tether.testing._clock import START

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
    """An hour's sleep: parked with no task of its own until the hour is up, not a second
    before; then the call has its result, stamped at the wake time."""
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=script("check_later"),
        tools=waiting_tools(3600),
        clock=clock,
    ) as sup:
        await sup.start(RUN, "check o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
        view = await sup.inspect(RUN)
        assert "check_later (toolu_1) sleeping until 2026-01-01 01:00:00 UTC" in view.reason
        tasks = len(asyncio.all_tasks())
        clock.advance(3599.9)
        await _rest(clock)
        assert (await sup.inspect(RUN)).status is RunStatus.SLEEPING  # never early
        clock.advance(0.1)
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    (waiting,) = of_type(events, Waiting)
    assert waiting.until == waiting.at + 3600
    result = result_of(events, "toolu_1")
    assert result.content == "o-1 checked again"
    assert result.at == waiting.until
    assert tasks < 20
    # Every record is dated by the supervisor's clock, none by the real one.
    assert all(START <= e.at <= clock.time() for e in events)


async def _rest(clock: VirtualClock) -> None:
    """Until the supervisor's timer sleeps on ``clock`` again (it saw the time and was not
    due yet), all else blocked."""
    with anyio.fail_after(WAIT):
        while clock.sleepers == 0:
            await anyio.sleep(0.005)
    await anyio.wait_all_tasks_blocked()


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
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=waiting_tools(3600), clock=clock
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING  # the first sleep
        if when == "before":  # delivered while the run sleeps, before anything waits for it
            await sup.signal(RUN, "payment.o-1", {"amount": 40}, signal_id="evt_1")
        clock.advance(3600)
        if when == "during":
            await _until_reason(sup, "await_payment (toolu_1) waiting for event payment.o-1")
            await sup.signal(RUN, "payment.o-1", {"amount": 40}, signal_id="evt_1")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    result = result_of(events, "toolu_1")
    assert (result.ok, result.content, result.signal_id) == (True, {"amount": 40}, "evt_1")
    (signal_,) = of_type(events, Signal)  # an answer, dated by the clock too
    assert signal_.at == (START if when == "before" else START + 3600)
    assert all(START <= e.at <= clock.time() for e in events)


async def _until_reason(sup: Supervisor, reason: str) -> None:
    with anyio.fail_after(WAIT):
        while reason not in (await sup.inspect(RUN)).reason:
            await anyio.sleep(0.02)


async def test_a_signal_delivered_twice_counts_once(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel(
        [
            [use("toolu_1", "await_payment", {"order": "o-1"})],
            [use("toolu_2", "await_payment", {"order": "o-1"})],
            "paid",
        ]
    )
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=waiting_tools(timeout=0.5), clock=clock
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
        for _ in range(2):  # the webhook retried its delivery
            await sup.signal(RUN, "payment.o-1", "paid", signal_id="evt_1")
        await _until_reason(sup, "await_payment (toolu_2) waiting for event payment.o-1")
        clock.advance(0.5)  # the second wait's timeout
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
        clock=VirtualClock(autojump_threshold=0),
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    result = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert (result.ok, result.content) == (ok, content)


async def test_the_sleep_tool_lets_the_model_wait_within_a_maximum(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()
    tools.add_sleep_tool(max_seconds=600)
    model = tether.ScriptedModel(
        [
            [use("toolu_1", "sleep", {"seconds": 3600, "reason": "too long"})],
            [use("toolu_2", "sleep", {"seconds": 300, "reason": "let the refund settle"})],
            "refund settled",
        ]
    )
    clock = VirtualClock(autojump_threshold=0)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools, clock=clock) as sup:
        await sup.start(RUN, "refund")
        assert await _until(sup, RunStatus.DONE) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    refused = result_of(events, "toolu_1")
    assert not refused.ok
    assert "seconds must be between 0 and 600" in refused.content
    slept = result_of(events, "toolu_2")
    assert slept.content == "slept 300 s (let the refund settle)"
    (waiting,) = of_type(events, Waiting)
    assert slept.at == waiting.until == waiting.at + 300


def _child(root: pathlib.Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.supervisor._wait_child", str(root), *args],
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


def _resume(root: pathlib.Path, later: float = 0.0) -> tuple[float, float]:
    """Serve the store in a child whose virtual clock starts ``later`` seconds after now,
    until the run is done: the sleep's length (from its journal) and the virtual seconds the
    child's clock moved on before the run woke."""
    worker = _child(root, "resume", str(later))
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    last = out.strip().splitlines()[-1]
    assert last.startswith("done after "), out
    slept, moved = last.removeprefix("done after ").split(", clock moved ")
    return float(slept), float(moved)


@pytest.mark.slow
def test_a_sleep_outlives_its_process_and_wakes_in_a_later_one(tmp_path: pathlib.Path) -> None:
    """SIGKILLed while the run sleeps an hour: a worker started at once does not wake it early
    (its clock jumps to the journaled wake time, not past a new hour); a worker that starts
    when the wake time has passed with nobody there goes on at once, moving its clock not at
    all. The kill is real (the point of the test); the hour is virtual."""
    _start_and_kill(tmp_path / "early")
    slept, moved = _resume(tmp_path / "early")
    assert slept >= 3600  # it waited for the journaled time...
    assert moved < 3600  # ...less what had passed before the kill: not a new hour

    _start_and_kill(tmp_path / "late")
    slept, moved = _resume(tmp_path / "late", later=2 * 3600)  # the wake time passed meanwhile
    assert slept >= 3600
    assert moved == 0  # a process start, not another sleep

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
    tools = waiting_tools(3600)
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=script(tool), tools=tools, clock=clock
    ) as sup:
        await sup.start(RUN, "check o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
    if wait == "signal":  # a webhook's tether signal, with no supervisor of its own
        argv = [*SIGNAL, "--root", str(tmp_path), RUN, "payment.o-1", "--data", "{}"]
        cli = await anyio.run_process(argv, cwd=REPO, check=False)
        assert cli.returncode == 0, cli.stderr
    else:
        clock.advance(3600)  # the wake time passes while no supervisor runs
    async with Supervisor(
        tether.FileStore(tmp_path), model=script(tool), tools=tools, clock=clock
    ) as later:
        assert await _until(later, RunStatus.DONE) is RunStatus.DONE
        assert (await later.inspect(RUN)).restarts == 0
    assert of_type(await read_events(tmp_path, RUN), Resumed) == []
