"""An answer to a run this supervisor is driving does not wait for the call in flight.

``Supervisor.signal``, ``decide`` and the other answers used to wait for the run's entry lock,
held by its task for as long as a tool call ran (minutes, for a slow call). Now the answer is
queued in the run's inbox at once, the run's journal being held, and the task takes it in at
the run's next pause, or drives the run once more if the post came after its last look.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from functools import partial

import anyio
import pytest

import tether
from tether import RunStateError
from tether.journal import AnyEvent, Decision, Event, FileStore, Signal
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, gated_tools, lookup_and_send_model, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
RUN = "run-1"


def slow_then_wait(gate: anyio.Event, started: anyio.Event) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def slow_lookup(order: str) -> str:
        """Look an order up, slowly."""
        started.set()
        await gate.wait()
        return f"{order} found"

    @tools.tool(policy="rerun")
    async def await_payment(order: str) -> tether.Wait:
        """Wait for the payment webhook."""
        return tether.wait_for(f"payment.{order}")

    return tools


def slow_then_wait_model() -> tether.ScriptedModel:
    return tether.ScriptedModel(
        [
            [use("toolu_1", "slow_lookup", {"order": "o-1"})],
            [use("toolu_2", "await_payment", {"order": "o-1"})],
            "paid",
        ]
    )


@pytest.mark.parametrize("sweeps", [3600.0, None], ids=["hourly sweeps", "no sweeps"])
async def test_a_signal_to_a_run_inside_a_slow_call_returns_at_once(
    tmp_path: pathlib.Path, sweeps: float | None
) -> None:
    """The signal is acknowledged while the call still runs, and the later wait has it."""
    gate, started = anyio.Event(), anyio.Event()
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=slow_then_wait_model(),
        tools=slow_then_wait(gate, started),
        sweep_interval=sweeps,
    ) as sup:
        await sup.start(RUN, "check o-1")
        with anyio.fail_after(WAIT):
            await started.wait()
            await sup.signal(RUN, "payment.o-1", {"paid": 12}, signal_id="evt-1")
        assert not gate.is_set()  # acknowledged while slow_lookup runs
        assert (tmp_path / "runs" / f"{RUN}.inbox").exists()  # queued, not yet recorded
        gate.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt-1"]
    assert "12" in str(result_of(events, "toolu_2").content)
    assert not (tmp_path / "runs" / f"{RUN}.inbox").exists()


async def test_a_decision_beside_a_slow_call_returns_at_once_and_the_call_runs(
    tmp_path: pathlib.Path,
) -> None:
    """One turn asks for a slow lookup and a send that needs approval: the approval is
    acknowledged while the lookup runs, and the send runs once the lookup is done."""
    sent: list[str] = []
    gate = anyio.Event()
    async with Supervisor(
        tether.FileStore(tmp_path), model=lookup_and_send_model(), tools=gated_tools(sent, gate)
    ) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            while not (await sup.inspect(RUN)).model_calls:  # inside slow_lookup
                await anyio.sleep(0.01)
            await sup.decide(RUN, "toolu_2", approved=True, by="priya")
        assert not gate.is_set()
        assert sent == []
        gate.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert sent == [f"{RUN}:toolu_2"]
    decisions = of_type(await read_events(tmp_path, RUN), Decision)
    assert [(d.call_id, d.by) for d in decisions] == [("toolu_2", "priya")]


Choose = Callable[[list[AnyEvent], list[AnyEvent]], Event | None]


class LatePosts:
    """Makes a store's posts (checked and written in one step, ``post_checked``) come only
    when ``let_post`` is set; with ``behind`` set, the held post comes just after a drive's
    next look at the run's inbox, which answers as it would have an instant before it."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.let_post, self.posting = anyio.Event(), anyio.Event()
        self.behind, self.landed = anyio.Event(), anyio.Event()
        post, has_inbox = store.post_checked, store.has_inbox

        async def late_post(run_id: str, choose: Choose) -> Event | None:
            self.posting.set()
            await self.let_post.wait()
            try:
                return await post(run_id, choose)
            finally:
                self.landed.set()

        async def look_then_post(run_id: str) -> bool:
            found = await has_inbox(run_id)
            if self.behind.is_set() and not self.let_post.is_set():
                self.let_post.set()
                await self.landed.wait()
            return found

        store.post_checked = late_post  # type: ignore[method-assign]
        store.has_inbox = look_then_post  # type: ignore[method-assign]


async def test_a_post_that_lands_after_the_drives_last_look_is_taken_in(
    tmp_path: pathlib.Path,
) -> None:
    """The post lands while the task still drives the run, just after its look at the
    inbox as the run came to rest: the task drives the run once more when it lets go."""
    gate, started = anyio.Event(), anyio.Event()
    late = LatePosts(tether.FileStore(tmp_path))
    async with Supervisor(
        late.store, model=slow_then_wait_model(), tools=slow_then_wait(gate, started)
    ) as sup:
        await sup.start(RUN, "check o-1")
        with anyio.fail_after(WAIT):
            await started.wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(sup.signal, RUN, "payment.o-1", "paid", signal_id="evt-1"))
                await late.posting.wait()  # queued: the journal is held
                late.behind.set()
                gate.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events: list[AnyEvent] = await read_events(tmp_path, RUN)
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt-1"]


@pytest.mark.parametrize("sweeps", [3600.0, None], ids=["hourly sweeps", "no sweeps"])
async def test_a_post_that_lands_after_the_drive_let_go_is_taken_in(
    tmp_path: pathlib.Path, sweeps: float | None
) -> None:
    """The signal is queued (the journal held), but its post lands only after the run has
    come to rest waiting for it, its drive's last look long past: a drive of its own takes
    it in, with no sweep to find it."""
    gate, started = anyio.Event(), anyio.Event()
    late = LatePosts(tether.FileStore(tmp_path))
    async with Supervisor(
        late.store,
        model=slow_then_wait_model(),
        tools=slow_then_wait(gate, started),
        sweep_interval=sweeps,
    ) as sup:
        await sup.start(RUN, "check o-1")
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(WAIT):
                await started.wait()
                tg.start_soon(partial(sup.signal, RUN, "payment.o-1", "paid", signal_id="evt-1"))
                await late.posting.wait()  # queued: the journal is held
            gate.set()
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.SLEEPING
            late.let_post.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events: list[AnyEvent] = await read_events(tmp_path, RUN)
    assert [s.signal_id for s in of_type(events, Signal)] == ["evt-1"]


async def test_a_signal_given_as_the_run_finishes_is_refused_not_dropped(
    tmp_path: pathlib.Path,
) -> None:
    """The signal was given while the run's last call ran (the journal held), and is checked
    and queued in one step, which comes only after the run finished: it is refused as such
    (it was once acknowledged as queued, checked against the run before its end)."""
    gate, started = anyio.Event(), anyio.Event()
    late = LatePosts(tether.FileStore(tmp_path))
    model = tether.ScriptedModel([[use("toolu_1", "slow_lookup", {"order": "o-1"})], "done"])
    refused: list[BaseException] = []

    async def deliver() -> None:
        try:
            await sup.signal(RUN, "payment.o-1", "paid", signal_id="evt-1")
        except RunStateError as exc:
            refused.append(exc)

    async with Supervisor(late.store, model=model, tools=slow_then_wait(gate, started)) as sup:
        await sup.start(RUN, "check o-1")
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(WAIT):
                await started.wait()
                tg.start_soon(deliver)
                await late.posting.wait()
            gate.set()
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
            late.let_post.set()
    assert "run already finished" in str(refused[0])
    assert of_type(await read_events(tmp_path, RUN), Signal) == []
    assert not (tmp_path / "runs" / f"{RUN}.inbox").exists()


async def test_an_answer_after_a_drain_leaves_the_run_for_the_next_process(
    tmp_path: pathlib.Path,
) -> None:
    """A drained supervisor starts no drive: an answer it is given then is recorded for the
    next process, and the run is not shown as running with no task (a wait never returned)."""
    sent: list[str] = []
    gate = anyio.Event()
    gate.set()
    async with Supervisor(
        tether.FileStore(tmp_path), model=lookup_and_send_model(), tools=gated_tools(sent, gate)
    ) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.drain()
        await sup.decide(RUN, "toolu_2", approved=True, by="priya")
        assert (await sup.wait(RUN, timeout=WAIT)).resting
    assert sent == []
    async with Supervisor(
        tether.FileStore(tmp_path), model=lookup_and_send_model(), tools=gated_tools(sent, gate)
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert sent == [f"{RUN}:toolu_2"]
