"""Timers, events and child runs on a PostgresStore: the same behaviour as on files, with
several workers on one database.

A sleeping run's timer is set in every worker that swept it and fires in whichever claims the
run first; a signal recorded from elsewhere wakes the worker at once (``NOTIFY``); a signal
for a run another worker holds waits in the inbox; a child run is never started twice.
"""

from __future__ import annotations

import pathlib
import sys
from collections import Counter
from typing import Any

import anyio
import pytest

import tether
from tether import operate
from tether.journal import AnyEvent, Signal, ToolResult, Waiting
from tether.models import Message
from tether.postgres import PostgresStore
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..supervisor import test_children, test_waits
from ..supervisor._helpers import STORE_ENV, of_type, result_of
from ..supervisor.test_busy_answers import slow_then_wait, slow_then_wait_model
from ..supervisor.test_children import CHILD, PARENT, answer, lead_tools

use = tether.ScriptedModel.tool_use
RUN = "run-1"
WAIT = 30.0
REPO = pathlib.Path(__file__).resolve().parents[2]


async def _events(dsn: str, schema: str, run_id: str = RUN) -> list[AnyEvent]:
    async with PostgresStore(dsn, schema=schema, create=False) as store:
        return await store.read(run_id)


async def _until(sup: Supervisor, want: RunStatus, run_id: str = RUN) -> None:
    with anyio.fail_after(WAIT):
        while (await sup.inspect(run_id)).status is not want:
            await anyio.sleep(0.02)


def _sleep_then_send(ledger: Counter[str]) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    """Sleep an hour, then send one email (counted in ``ledger``)."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def check_later(order: str) -> tether.Wait:
        """Check an order again in a while."""
        return tether.sleep_for(3600, result=f"{order} checked again")

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, ctx: tether.ToolContext) -> str:
        """Send an email."""
        ledger[ctx.idempotency_key] += 1
        return "sent"

    model = tether.ScriptedModel(
        [
            [use("toolu_1", "check_later", {"order": "o-1"})],
            [use("toolu_2", "send_email", {"to": "ana@example.com"})],
            "told the customer",
        ]
    )
    return model, tools


@pytest.mark.slow
def test_a_sleep_outlives_its_process_and_wakes_in_a_later_one(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file test's scenario on PostgreSQL: SIGKILLed during an hour's sleep, the run is not
    woken early by a worker started at once, and one started after the wake time (nobody alive
    then) goes on at once. The kill is real; the hour is virtual (the workers' clocks), while
    the killed worker's lease runs out on the database's real time."""
    monkeypatch.setenv(STORE_ENV, f"{pg_dsn}#{pg_schema}_early")
    test_waits._start_and_kill(tmp_path / "early")
    slept, moved = test_waits._resume(tmp_path / "early")
    assert slept >= 3600
    assert moved < 3600

    monkeypatch.setenv(STORE_ENV, f"{pg_dsn}#{pg_schema}_late")
    test_waits._start_and_kill(tmp_path / "late")
    slept, moved = test_waits._resume(tmp_path / "late", later=2 * 3600)
    assert slept >= 3600
    assert moved == 0  # a process start (and a lease to expire), not another sleep


async def test_a_timer_fires_in_whichever_worker_claims_the_run_first(
    pg_dsn: str, pg_schema: str
) -> None:
    """Two workers know the sleeping run; both timers fire; the email goes out once. Then the
    worker that started it leaves before the wake time, and the other one wakes it."""
    for run_id, leave in (("run-both", False), ("run-other", True)):
        ledger: Counter[str] = Counter()
        model, tools = _sleep_then_send(ledger)
        clock = VirtualClock()  # the two workers' one clock: the hour passes for both at once
        async with Supervisor(
            PostgresStore(pg_dsn, schema=pg_schema),
            model=model,
            tools=tools,
            sweep_interval=0.1,
            clock=clock,
        ) as second:
            async with Supervisor(
                PostgresStore(pg_dsn, schema=pg_schema),
                model=model,
                tools=tools,
                sweep_interval=0.1,
                clock=clock,
            ) as first:
                await first.start(run_id, "check o-1")
                await _until(first, RunStatus.SLEEPING, run_id)
                await _until(second, RunStatus.SLEEPING, run_id)  # its sweep saw it park
                if not leave:
                    clock.advance(3600)
                    await _until(first, RunStatus.DONE, run_id)
            if leave:
                clock.advance(3600)
            await _until(second, RunStatus.DONE, run_id)
        events = await _events(pg_dsn, pg_schema, run_id)
        (waiting,) = of_type(events, Waiting)
        woke = result_of(events, "toolu_1")
        assert waiting.until is not None
        assert woke.at >= waiting.until  # never early
        assert ledger == Counter({f"{run_id}:toolu_2": 1})
        assert len(of_type(events, ToolResult)) == 2


def _payment_tools(slow_done: anyio.Event | None = None) -> tether.ToolRegistry:
    tools = test_waits.waiting_tools()

    @tools.tool(policy="rerun")
    async def slow_report(order: str) -> str:
        """Write a long report."""
        if slow_done is not None:
            await slow_done.wait()
        return "report written"

    return tools


async def _signal_cli(dsn: str, schema: str, *args: str) -> bytes:
    argv = [sys.executable, "-m", "tether.cli", "signal", "--store", dsn, "--schema", schema]
    done = await anyio.run_process([*argv, *args], cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_signal_sent_from_elsewhere_wakes_the_worker_at_once(
    pg_dsn: str, pg_schema: str
) -> None:
    """`tether signal --store` on another machine, twice with one id, while the worker's sweep
    is ten minutes away: the notification wakes it, and the payload counts once."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def await_payment(order: str, timeout: float | None = None) -> tether.Wait:
        """Wait for the payment webhook."""
        return tether.wait_for(f"payment.{order}", timeout=timeout)

    model = tether.ScriptedModel(
        [
            [use("toolu_1", "await_payment", {"order": "o-1"})],
            [use("toolu_2", "await_payment", {"order": "o-1", "timeout": 1.0})],
            "paid",
        ]
    )
    clock = VirtualClock()
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema),
        model=model,
        tools=tools,
        sweep_interval=600,
        clock=clock,
    ) as sup:
        await sup.start(RUN, "settle o-1")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
        # (the first wait has no timeout: only the notification can wake the worker)
        first = await sup.inspect(RUN)
        assert "waiting for event payment.o-1" in first.reason
        outs = [
            await _signal_cli(
                pg_dsn, pg_schema, RUN, "payment.o-1", "--id", "evt_1", "--data", '"paid"'
            )
            for _ in range(2)
        ]
        assert outs[0].startswith(b"recorded: signal payment.o-1 (evt_1)")
        assert outs[1].startswith(b"already recorded: signal payment.o-1 (evt_1)")
        with anyio.fail_after(WAIT):  # the second wait, which the duplicate does not end
            while "await_payment (toolu_2)" not in (await sup.inspect(RUN)).reason:
                await anyio.sleep(0.02)
        clock.advance(1.0)  # its timeout
        await _until(sup, RunStatus.DONE)
    events = await _events(pg_dsn, pg_schema)
    assert result_of(events, "toolu_1").content == "paid"
    second = result_of(events, "toolu_2")  # the second delivery gave it nothing
    assert (second.ok, second.content) == (False, "no 'payment.o-1' event within 1 s")
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt_1"]


async def test_a_signal_for_a_run_another_worker_holds_goes_through_its_inbox(
    pg_dsn: str, pg_schema: str
) -> None:
    slow_done = anyio.Event()
    model = tether.ScriptedModel(
        [
            [
                use("toolu_1", "await_payment", {"order": "o-1"}),
                use("toolu_2", "slow_report", {"order": "o-1"}),
            ],
            "settled",
        ]
    )
    store = PostgresStore(pg_dsn, schema=pg_schema)
    async with Supervisor(store, model=model, tools=_payment_tools(slow_done)) as sup:
        await sup.start(RUN, "settle o-1")
        with anyio.fail_after(WAIT):
            while not of_type(await store.read(RUN), Waiting):
                await anyio.sleep(0.02)
        out = await _signal_cli(
            pg_dsn, pg_schema, RUN, "payment.o-1", "--id", "evt_9", "--data", '{"amount": 40}'
        )
        assert b"queued: another process is advancing the run" in out
        assert await store.has_inbox(RUN)
        slow_done.set()
        await _until(sup, RunStatus.DONE)
        assert not await store.has_inbox(RUN)
    events = await _events(pg_dsn, pg_schema)
    assert result_of(events, "toolu_1").content == {"amount": 40}
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt_9"]


async def test_a_child_run_its_budget_and_its_cancellation(pg_dsn: str, pg_schema: str) -> None:
    # The child's answer is the parent call's result.
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema),
        model=tether.ScriptedModel(answer),
        tools=lead_tools(),
    ) as sup:
        await sup.start(PARENT, "a customer asks about refunds")
        await _until(sup, RunStatus.DONE, PARENT)
        parent, child = await sup.inspect(PARENT), await sup.inspect(CHILD)
    assert parent.final_text == "Told the customer: Refunds take five days."
    assert child.status is RunStatus.DONE
    assert parent.input_tokens > child.input_tokens

    # Its spending counts towards the parent's budget.
    budget_schema = f"{pg_schema}_budget"
    async with Supervisor(
        PostgresStore(pg_dsn, schema=budget_schema),
        model=tether.ScriptedModel(answer),
        tools=lead_tools(),
    ) as sup:
        await sup.start(PARENT, "a customer asks", budgets=tether.Budgets(max_model_calls=2))
        await _until(sup, RunStatus.FAILED, PARENT)
        assert (await sup.inspect(PARENT)).reason == "model call budget exhausted: 2 of 2"

    # Cancelling the parent cancels the child, held by another worker.
    hold = anyio.Event()

    async def slow_answer(messages: list[Message]) -> Any:
        if str(messages[0]["content"]).startswith("research"):
            await hold.wait()
        return answer(messages)

    cancel_schema = f"{pg_schema}_cancel"
    model = tether.ScriptedModel(slow_answer)
    async with Supervisor(
        PostgresStore(pg_dsn, schema=cancel_schema), model=model, tools=lead_tools()
    ) as sup:
        await sup.start(PARENT, "a customer asks")
        await _until(sup, RunStatus.SLEEPING, PARENT)
        await sup.cancel(PARENT, reason="customer left")
        await _until(sup, RunStatus.CANCELLED, CHILD)
        assert (await sup.inspect(CHILD)).reason == "its parent: customer left"


@pytest.mark.parametrize(
    ("crash_at", "answers"),
    [("result_saved", 1), ("model_answered:2", 2), ("model_saved:2", 1)],
)
def test_a_kill_around_a_child_run_never_starts_it_twice(
    tmp_path: pathlib.Path,
    pg_dsn: str,
    pg_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    crash_at: str,
    answers: int,
) -> None:
    monkeypatch.setenv(STORE_ENV, f"{pg_dsn}#{pg_schema}")
    test_children.test_a_kill_around_a_child_run_never_starts_it_twice(tmp_path, crash_at, answers)


def _lead_with_a_child_that(tool: str) -> tether.ScriptedModel:
    """The lead's answers; its child's first answer asks for ``tool``."""

    def answers(messages: list[Message]) -> Any:
        first = str(messages[0]["content"])
        step = sum(1 for m in messages if m["role"] == "assistant")
        if first.startswith("research") and step == 0:
            return [tether.ScriptedModel.tool_use("toolu_n", tool, {})]
        return answer(messages)

    return tether.ScriptedModel(answers)


@pytest.mark.parametrize("child_is", ["asleep", "held"])
async def test_a_child_cancelled_by_a_person_wakes_its_sleeping_parent(
    pg_dsn: str, pg_schema: str, child_is: str
) -> None:
    """Runs created by one process, driven by a worker that took them up in a sweep. The
    child's cancellation is recorded (asleep: nobody holds it) or queued and carried out by
    the worker (held): either way its parent hears of it at once and finishes. A sweep lists
    only unfinished runs here, so it never read the cancelled child again to tell the parent
    (the parent slept on until a new worker started)."""
    tools = lead_tools()
    hold = anyio.Event()

    @tools.tool(policy="rerun")
    async def nap() -> tether.Wait:
        """Sleep ten minutes."""
        return tether.sleep_for(600)

    @tools.tool(policy="rerun")
    async def slow_read() -> str:
        """Read, slowly."""
        await hold.wait()
        return "read"

    model = _lead_with_a_child_that("nap" if child_is == "asleep" else "slow_read")
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema), model=model, tools=tools, resume=False
    ) as creator:
        await creator.start(PARENT, "a customer asks", drive=False)
    # Sweeps an hour apart: the cancellation's notice must wake the parent, not a sweep (the
    # child's end written to the parent by another store once did not notify).
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema), model=model, tools=tools, sweep_interval=3600
    ) as worker:
        want = RunStatus.SLEEPING if child_is == "asleep" else RunStatus.RUNNING
        await test_children.wait_for_status(worker, CHILD, want)
        for _ in range(2):  # the parent, asleep, is now known to the worker's sweeps as it is
            await worker._sweeper.sweep()  # (as a sweep would, meanwhile)
        async with PostgresStore(pg_dsn, schema=pg_schema) as other:  # as `tether cancel`
            done = await operate.cancel(other, CHILD, reason="not needed", by="priya")
        assert done.queued is (child_is == "held")
        await _until(worker, RunStatus.DONE, PARENT)
        hold.set()
        parent = await worker.inspect(PARENT)
    assert parent.final_text is not None
    assert "not needed" in parent.final_text


async def test_a_signal_to_a_run_inside_a_slow_call_returns_at_once(
    pg_dsn: str, pg_schema: str
) -> None:
    """As on files: the signal is queued while this supervisor's task is in a slow call (the
    run's lease is its own), acknowledged at once, and the later wait has it."""
    gate, started = anyio.Event(), anyio.Event()
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema),
        model=slow_then_wait_model(),
        tools=slow_then_wait(gate, started),
    ) as sup:
        await sup.start(RUN, "check o-1")
        with anyio.fail_after(WAIT):
            await started.wait()
            await sup.signal(RUN, "payment.o-1", {"paid": 12}, signal_id="evt-1")
        assert not gate.is_set()
        gate.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events = await _events(pg_dsn, pg_schema)
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt-1"]
    assert "12" in str(result_of(events, "toolu_2").content)
