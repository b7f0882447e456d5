"""A tool whose service cannot be reached (``ToolUnavailableError``: nothing was sent) is not
the run's fault: the run rests (``sleeping``, saying why, with no task) and tries again, 1 s
doubling to 60 s, for as long as it takes, whatever the tool's policy and ``retries``; the
attempts that were never sent spend neither ``retries`` nor ``max_tool_calls`` nor count as
crashes, and once the service is back the call runs, once.

Time is virtual (``VirtualClock``): a test moves it where it looks at a rest, and lets it
jump where nothing must happen in between; no test sleeps.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest

import tether
from tether.journal import (
    Budgets,
    Escalated,
    Resolved,
    Resumed,
    RunFinished,
    ToolFailed,
    ToolStarted,
)
from tether.operate import summarize
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock
from tether.testing._clock import START

from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
RUN = "run-1"
CALL = "toolu_1"
REPO = pathlib.Path(__file__).resolve().parents[2]


def half() -> float:
    """Jitter of 0.5: each backoff is its base (1 s, 2 s, 4 s, ... up to 60 s)."""
    return 0.5


class Service:
    """A service that is down for its first ``down`` attempts, then answers."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.tries: list[int] = []  # the attempt of each try, sent or not
        self.served: list[str] = []  # what was carried out

    def tools(self, **options: Any) -> tether.ToolRegistry:
        tools = tether.ToolRegistry()

        @tools.tool(**options)
        async def search(query: str, ctx: tether.ToolContext) -> str:
            """Search the docs."""
            self.tries.append(ctx.attempt)
            if len(self.tries) <= self.down:
                raise tether.ToolUnavailableError("search", "connection refused", attempt=ctx)
            self.served.append(query)
            return f"3 pages about {query}"

        return tools


def script() -> tether.ScriptedModel:
    return tether.ScriptedModel([[use(CALL, "search", {"query": "leases"})], "found them"])


def supervised(
    root: pathlib.Path, service: Service, clock: VirtualClock, **options: Any
) -> Supervisor:
    """A supervisor of ``script()`` over ``service``'s tool (``options``: the tool's own) on
    a directory store at ``root``, on ``clock``, with no jitter."""
    return Supervisor(
        tether.FileStore(root),
        model=script(),
        tools=service.tools(**options),
        clock=clock,
        jitter=half,
    )


async def _asleep(sup: Supervisor, clock: VirtualClock, tries: int) -> str:
    """Once the run rests after its ``tries``-th try (everything else blocked): its reason."""
    with anyio.fail_after(WAIT):
        while True:
            view = await sup.inspect(RUN)
            if view.status is RunStatus.SLEEPING and f"tried {_times(tries)}" in view.reason:
                break
            await anyio.sleep(0.005)
        while clock.sleepers == 0:
            await anyio.sleep(0.005)
    await anyio.wait_all_tasks_blocked()
    return view.reason


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times in a row"


async def _until(sup: Supervisor, want: RunStatus) -> None:
    with anyio.fail_after(WAIT):
        while (await sup.inspect(RUN)).status is not want:
            await anyio.sleep(0.01)


async def test_the_run_rests_while_the_service_is_down_and_goes_on_once_it_is_back(
    tmp_path: pathlib.Path,
) -> None:
    """Five tries past a tool with no retries and a budget of one tool call: each rest says
    why and until when, nothing happens before its time (no busy loop), and the sixth try
    runs the call, once; the run ends done with the tool's result and one tool call spent."""
    service = Service(down=5)
    clock = VirtualClock()
    async with supervised(tmp_path, service, clock, policy="escalate", retries=0) as sup:
        await sup.start(RUN, "find the docs on leases", budgets=Budgets(max_tool_calls=1))
        waited = 0.0
        for tries, pause in enumerate([1.0, 2.0, 4.0, 8.0, 16.0], start=1):
            reason = await _asleep(sup, clock, tries)
            due = START + waited + pause
            when = _stamp(due)
            assert reason == (
                "search (toolu_1) waiting for its service: tool 'search': connection refused; "
                f"nothing was sent (tried {_times(tries)}); next try at {when}"
                "; resolve it to give the model a result, or cancel the run"
            )
            clock.advance(pause - 0.1)
            await anyio.wait_all_tasks_blocked()
            assert len(service.tries) == tries  # not a moment early
            clock.advance(0.1)
            waited += pause
        await _until(sup, RunStatus.DONE)
        view = await sup.inspect(RUN)
    assert view.status is RunStatus.DONE
    assert service.served == ["leases"]
    assert service.tries == [1, 2, 3, 4, 5, 6]
    events = await read_events(tmp_path, RUN)
    failed = of_type(events, ToolFailed)
    assert [(f.attempt, f.unsent, f.timed_out) for f in failed] == [
        (n, True, False) for n in range(1, 6)
    ]
    assert [f.retry_at - f.at for f in failed if f.retry_at] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert result_of(events, CALL).content == "3 pages about leases"
    assert of_type(events, RunFinished)[-1].status == "done"
    assert of_type(events, Resumed) == []  # no rest was counted as an interruption
    summary = summarize(RUN, events, now=clock.time())
    assert (summary.tool_calls, summary.restarts) == (1, 0)


def _stamp(at: float) -> str:
    """``at`` as the status writes a time."""
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def test_the_backoff_grows_to_a_minute_and_stays_there(tmp_path: pathlib.Path) -> None:
    """An outage of many tries: the waits double to 60 s and stay at 60 s, and the run waits
    through all of them, however many ``retries`` its tool has."""
    service = Service(down=12)
    async with supervised(
        tmp_path, service, VirtualClock(autojump_threshold=0), policy="rerun", retries=1
    ) as sup:
        await sup.start(RUN, "find the docs on leases")
        await _until(sup, RunStatus.DONE)
    events = await read_events(tmp_path, RUN)
    waits = [f.retry_at - f.at for f in of_type(events, ToolFailed) if f.retry_at]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0, 60.0, 60.0]
    assert service.served == ["leases"]
    assert result_of(events, CALL).ok


@pytest.mark.parametrize(
    "options",
    [
        {"policy": "escalate"},
        {"policy": "verify", "verify": None},
        {"policy": "idempotency_key", "retries": 2, "retry_on": tether.ToolUnavailableError},
        {"policy": "rerun", "retries": 1, "retry_on": ConnectionError},
    ],
    ids=["escalate", "verify", "in-retry_on", "other-retry_on"],
)
async def test_a_call_never_sent_is_tried_again_whatever_the_policy(
    tmp_path: pathlib.Path, options: dict[str, Any]
) -> None:
    """Nothing was sent, so nothing can happen twice: no policy is asked, no escalation, no
    verify, no error result; only the service's coming back."""
    if "verify" in options:

        async def landed(query: str) -> str | None:
            raise AssertionError("verify asked about an attempt that was never sent")

        options = {**options, "verify": landed}
    service = Service(down=4)
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=script(),
        tools=service.tools(**options),
        clock=VirtualClock(autojump_threshold=0),
    ) as sup:
        await sup.start(RUN, "find the docs on leases")
        await _until(sup, RunStatus.DONE)
    events = await read_events(tmp_path, RUN)
    assert service.served == ["leases"]
    assert [s.attempt for s in of_type(events, ToolStarted)] == [1, 2, 3, 4, 5]
    assert all(f.unsent for f in of_type(events, ToolFailed))
    assert result_of(events, CALL).content == "3 pages about leases"


async def test_a_call_beside_it_goes_on_while_it_waits(tmp_path: pathlib.Path) -> None:
    """A turn of two calls: the one whose service answers is recorded at once, the other
    rests; the model is asked again only once both have their results."""
    service = Service(down=2)
    tools = service.tools(policy="rerun")

    @tools.tool(policy="rerun")
    async def clock_time() -> str:
        """The time."""
        return "noon"

    model = tether.ScriptedModel(
        [
            [use(CALL, "search", {"query": "leases"}), use("toolu_2", "clock_time", {})],
            "found them at noon",
        ]
    )
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, clock=clock, jitter=half
    ) as sup:
        await sup.start(RUN, "go")
        await _asleep(sup, clock, 1)
        events = await read_events(tmp_path, RUN)
        assert result_of(events, "toolu_2").content == "noon"
        assert model.calls == 1
        clock.advance(1.0)
        await _asleep(sup, clock, 2)
        clock.advance(2.0)
        await _until(sup, RunStatus.DONE)
    assert model.calls == 2
    assert service.served == ["leases"]


async def test_a_person_can_cancel_a_run_that_waits_for_its_service(
    tmp_path: pathlib.Path,
) -> None:
    service = Service(down=1_000)
    clock = VirtualClock()
    async with supervised(tmp_path, service, clock, policy="rerun") as sup:
        await sup.start(RUN, "go")
        await _asleep(sup, clock, 1)
        await sup.cancel(RUN, reason="the docs server is retired", by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
        clock.advance(3600)
        await anyio.wait_all_tasks_blocked()
    assert service.tries == [1]  # nothing tried after the cancellation
    (finished,) = of_type(await read_events(tmp_path, RUN), RunFinished)
    assert (finished.status, finished.reason) == (
        "cancelled",
        "the docs server is retired (by priya)",
    )


def test_a_process_killed_while_the_run_waits_for_its_service_is_no_crash(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL while the run rests for its service: the next process takes the wait up where
    the journal left it, tries again until the service answers, and the run ends done with
    the call carried out once. The run was at rest when its process died, so nothing records
    an interruption, and no attempt that was never sent is counted."""

    def child(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.supervisor._outage_child", str(tmp_path), *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = child("start")
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "waiting"
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL

    second = child("resume")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {
        "status": "done",
        "attempts": [1, 2, 3, 4],
        "unsent": [1, 2, 3],  # one before the kill, two after it
        "resumed": [],  # the kill found it at rest: no interruption, no crash
        "restarts": 0,
        "tool_calls": 1,
        "final_text": "found",
    }
    assert (tmp_path / "ledger").read_text() == "search leases attempt 4\n"


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
async def test_a_person_can_resolve_a_call_whose_service_will_not_come_back(
    tmp_path: pathlib.Path, outcome: str
) -> None:
    """A retired server: ``resolve`` hands the model a result in place of the service's
    answer, and the run goes on; nothing more is tried. ``retry`` is refused: the call is
    tried again on its own."""
    service = Service(down=1_000)
    clock = VirtualClock()
    async with supervised(tmp_path, service, clock, policy="rerun") as sup:
        await sup.start(RUN, "go")
        reason = await _asleep(sup, clock, 1)
        assert reason.endswith("; resolve it to give the model a result, or cancel the run")
        with pytest.raises(tether.RunStateError, match="tried again on its own"):
            await sup.resolve(RUN, CALL, outcome="retry", by="priya")
        await sup.resolve(RUN, CALL, outcome=outcome, result="the docs moved", by="priya")  # type: ignore[arg-type]
        await _until(sup, RunStatus.DONE)
        clock.advance(3600)
        await anyio.wait_all_tasks_blocked()
    assert service.tries == [1]
    events = await read_events(tmp_path, RUN)
    result = result_of(events, CALL)
    assert (result.ok, result.content) == (outcome == "succeeded", "the docs moved")
    assert of_type(events, RunFinished)[-1].status == "done"


class Payments:
    """A payment service down for the first try of ``pay``; then the request is sent and the
    connection drops (``OutcomeUnknownError``: it may have paid), once ``sent`` is set."""

    def __init__(self) -> None:
        self.tries: list[int] = []
        self.sent = anyio.Event()
        self.release = anyio.Event()  # what the sibling call ``slow`` waits for

    def tools(self) -> tether.ToolRegistry:
        tools = tether.ToolRegistry()

        @tools.tool(policy="escalate", retries=0)
        async def pay(amount: int, ctx: tether.ToolContext) -> str:
            """Pay."""
            self.tries.append(ctx.attempt)
            if len(self.tries) == 1:
                raise tether.ToolUnavailableError("pay", "connection refused", attempt=ctx)
            await self.sent.wait()
            raise tether.OutcomeUnknownError("pay", "connection lost mid-request; may have paid")

        @tools.tool(policy="rerun")
        async def slow(x: int) -> str:
            """Slow."""
            await self.release.wait()
            return "slow done"

        return tools


PAY = "toolu_A"


def _pay_script() -> tether.ScriptedModel:
    return tether.ScriptedModel(
        [[use(PAY, "pay", {"amount": 5}), use("toolu_B", "slow", {"x": 1})], "ok"]
    )


async def _settled(sup: Supervisor) -> RunStatus:
    """The run's status once it is done, failed or needs attention."""
    settled = (RunStatus.DONE, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)
    with anyio.fail_after(WAIT):
        while (status := (await sup.inspect(RUN)).status) not in settled:
            await anyio.sleep(0.005)
    await anyio.wait_all_tasks_blocked()
    return status


async def _until_tried(service: Payments, n: int) -> None:
    with anyio.fail_after(WAIT):
        while len(service.tries) < n:
            await anyio.sleep(0.005)
    await anyio.wait_all_tasks_blocked()


async def test_a_resolution_queued_while_a_sibling_runs_answers_the_wait_it_was_given_for(
    tmp_path: pathlib.Path,
) -> None:
    """``pay`` waits for its service while ``slow`` holds the run; a person resolves ``pay``
    as failed (queued: the run is held), its retry comes due, then ``slow`` ends. The queued
    answer is taken in before ``pay`` is tried again: it answers the wait it was given for,
    and nothing is sent (not an attempt sent, its outcome unknown, escalated, and the answer
    applied to that escalation, which nobody saw)."""
    service = Payments()
    service.sent.set()  # tried again, it would be sent and end with its outcome unknown
    clock = VirtualClock()
    store = tether.FileStore(tmp_path)
    async with Supervisor(
        store, model=_pay_script(), tools=service.tools(), clock=clock, jitter=half
    ) as sup:
        await sup.start(RUN, "pay 5")
        await _until_tried(service, 1)
        done = await tether.operate.resolve(
            store, RUN, PAY, outcome="failed", by="ops", note="payment server retired; not paid"
        )
        assert done.queued
        assert isinstance(done.record, Resolved)
        assert done.record.attempts == 1
        assert "record it only if the call still waits for its service" in (
            tether.operate.acknowledgement(RUN, done)
        )
        clock.advance(5)  # pay's next try is due
        service.release.set()  # slow ends: the loop would try pay again at once
        assert await _settled(sup) is RunStatus.DONE
    assert service.tries == [1]
    events = await read_events(tmp_path, RUN)
    assert of_type(events, Escalated) == []
    (resolved,) = of_type(events, Resolved)
    assert (resolved.outcome, resolved.attempts) == ("failed", 1)
    result = result_of(events, PAY)
    assert not result.ok
    assert "not paid" in str(result.content)


async def test_a_resolution_for_a_wait_the_call_left_is_dropped_when_taken_in(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A resolution given while ``pay`` waited for its service after attempt 1 reaches the
    holder only after attempt 2 was sent and escalated (queued just before the holder tried
    again): it answers another question, so the holder drops it, and says so; the escalation
    waits for a person."""
    service = Payments()
    service.release.set()
    clock = VirtualClock()
    store = tether.FileStore(tmp_path)
    async with Supervisor(
        store, model=_pay_script(), tools=service.tools(), clock=clock, jitter=half
    ) as sup:
        await sup.start(RUN, "pay 5")
        await _until_tried(service, 1)
        clock.advance(5)
        await _until_tried(service, 2)  # attempt 2 is in flight: sent, no answer yet
        stale = Resolved(call_id=PAY, outcome="failed", by="ops", note="not paid", attempts=1)
        await store.post_checked(RUN, lambda events, queued: stale)
        service.sent.set()  # the connection drops: outcome unknown, escalated
        assert await _settled(sup) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert view.pending == (PAY,)
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, Escalated)) == 1
    assert of_type(events, Resolved) == []
    assert "no longer waits for its service as it did" in caplog.text
    assert "it was escalated after attempt 2" in caplog.text
