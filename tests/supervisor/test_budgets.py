"""Budgets: model calls, tool calls, tokens, wall-clock deadline and restarts, all counted from
the journal so that a restart cannot reset them."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import anyio
import pytest

import tether
from tether import RunStateError
from tether.journal import (
    Budgets,
    ModelResponse,
    Parked,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Suspended,
    ToolStarted,
    Usage,
)
from tether.models import Message, ModelReply, SystemPrompt, ToolDefinition
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import WAIT, of_type, read_events

use = tether.ScriptedModel.tool_use
RUN = "run-1"


def step_tools(
    ran: list[str], *, sleep: float = 0.0, clock: VirtualClock | None = None
) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(name: str) -> str:
        """Do one step (taking ``sleep`` seconds of ``clock``'s time)."""
        ran.append(name)
        if sleep and clock is not None:
            await clock.sleep(sleep)
        return f"did {name}"

    @tools.tool(policy="rerun", approval=True)
    async def gated_step(name: str) -> str:
        """Do one step a person approved."""
        ran.append(name)
        return f"did {name}"

    return tools


def steps(*names: str) -> list[Any]:
    return [[use(f"toolu_{n}", "step", {"name": n})] for n in names]


async def finish(
    root: pathlib.Path,
    model: tether.models.Model,
    tools: tether.ToolRegistry,
    budgets: Budgets,
    **options: Any,
) -> Any:
    async with Supervisor(tether.FileStore(root), model=model, tools=tools, **options) as sup:
        await sup.start(RUN, "go", budgets=budgets)
        status = await sup.wait(RUN, timeout=WAIT)
        view = await sup.inspect(RUN)
    assert status is view.status
    return view


async def assert_failed_in_journal(root: pathlib.Path, reason: str) -> None:
    events = await read_events(root, RUN)
    last = events[-1]
    assert isinstance(last, RunFinished)
    assert (last.status, last.reason) == ("failed", reason)
    assert len(of_type(events, RunFinished)) == 1


async def test_model_call_budget(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel([*steps("a", "b", "c"), "done"])
    view = await finish(tmp_path, model, step_tools(ran), Budgets(max_model_calls=2))

    assert view.status is RunStatus.FAILED
    assert view.reason == "model call budget exhausted: 2 of 2"
    assert model.calls == 2
    assert view.model_calls == 2
    assert ran == ["a", "b"]  # the second answer's call still ran; the third answer was never asked
    await assert_failed_in_journal(tmp_path, view.reason)


async def test_tool_call_budget(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel(
        [
            *steps("a"),
            [use("toolu_b", "step", {"name": "b"}), use("toolu_c", "step", {"name": "c"})],
            "done",
        ]
    )
    view = await finish(tmp_path, model, step_tools(ran), Budgets(max_tool_calls=2))

    assert view.status is RunStatus.FAILED
    assert "tool call budget exhausted" in view.reason
    assert "limit 2" in view.reason
    # A turn whose calls do not all fit runs none of them.
    assert ran == ["a"]
    assert view.tool_calls == 1
    assert model.calls == 2
    await assert_failed_in_journal(tmp_path, view.reason)


async def test_token_budget(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel(
        [*steps("a", "b", "c"), "done"], usage=Usage(input_tokens=60, output_tokens=40)
    )
    view = await finish(tmp_path, model, step_tools(ran), Budgets(max_tokens=150))

    assert view.status is RunStatus.FAILED
    assert view.reason == "token budget exhausted: 200 of 150"
    assert (view.input_tokens, view.output_tokens) == (120, 80)
    assert model.calls == 2
    await assert_failed_in_journal(tmp_path, view.reason)


async def test_deadline(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel([*steps("slow"), "done"])
    clock = VirtualClock(autojump_threshold=0)
    tools = step_tools(ran, sleep=3600, clock=clock)
    view = await finish(tmp_path, model, tools, Budgets(deadline_s=1800), clock=clock)

    assert view.status is RunStatus.FAILED
    assert view.reason == "deadline of 1800 s passed"
    assert ran == ["slow"]
    assert model.calls == 1
    await assert_failed_in_journal(tmp_path, view.reason)


async def test_budgets_survive_a_restart(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    tools = step_tools(ran)
    script = [
        *steps("a"),
        [use("toolu_g", "gated_step", {"name": "g"})],
        *steps("c"),
        "done",
    ]
    first = tether.ScriptedModel(script)
    async with Supervisor(tether.FileStore(tmp_path), model=first, tools=tools) as sup:
        await sup.start(RUN, "go", budgets=Budgets(max_model_calls=3, max_tool_calls=10))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    assert first.calls == 2

    second = tether.ScriptedModel(script)
    async with Supervisor(tether.FileStore(tmp_path), model=second, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        assert (await sup.inspect(RUN)).model_calls == 2
        await sup.decide(RUN, "toolu_g", approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED
        view = await sup.inspect(RUN)

    assert view.reason == "model call budget exhausted: 3 of 3"
    assert second.calls == 1  # the new process had one call left, not three
    assert view.model_calls == 3
    assert ran == ["a", "g", "c"]
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, ModelResponse)) == 3
    await assert_failed_in_journal(tmp_path, view.reason)


class ExplodingModel:
    """A model whose every call raises: the run's task crashes each time it asks."""

    def __init__(self, *, hang_at: int | None = None) -> None:
        self.calls = 0
        self.hang_at = hang_at
        self.hanging = anyio.Event()

    @property
    def name(self) -> str:
        return "exploding"

    @property
    def params(self) -> dict[str, Any]:
        return {}

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        self.calls += 1
        if self.calls == self.hang_at:
            self.hanging.set()
            await anyio.sleep_forever()
        raise RuntimeError("model exploded")


async def test_a_crash_loop_parks_the_run_for_a_person_instead_of_failing_it(
    tmp_path: pathlib.Path,
) -> None:
    model = ExplodingModel()
    view = await finish(
        tmp_path,
        model,
        tether.ToolRegistry(),
        Budgets(),
        max_restarts=2,
        restart_backoff=0.01,
    )

    assert view.status is RunStatus.NEEDS_ATTENTION
    assert "stopped 3 times in a row without progress (limit 2)" in view.reason
    assert "while asking the model" in view.reason
    assert "RuntimeError: model exploded" in view.reason
    assert model.calls == 3  # the first try and two restarts
    assert view.restarts == 3
    events = await read_events(tmp_path, RUN)
    resumes = of_type(events, Resumed)
    assert [e.attempt for e in resumes] == [1, 2, 3]
    assert all(e.charged and e.cause.startswith("error: RuntimeError") for e in resumes)
    assert of_type(events, RunFinished) == []  # parked, not failed: a person can send it on
    (parked,) = of_type(events, Parked)
    assert parked.cause == "crash_loop"


async def test_a_runs_own_restart_budget_wins(tmp_path: pathlib.Path) -> None:
    model = ExplodingModel()
    view = await finish(
        tmp_path,
        model,
        tether.ToolRegistry(),
        Budgets(max_restarts=1),
        max_restarts=5,
        restart_backoff=0.01,
    )
    assert view.status is RunStatus.NEEDS_ATTENTION
    assert "stopped 2 times in a row without progress (limit 1)" in view.reason
    assert model.calls == 2


async def test_a_retried_crash_loop_gets_a_fresh_count_and_finishes(
    tmp_path: pathlib.Path,
) -> None:
    model = ExplodingModel()
    await finish(tmp_path, model, tether.ToolRegistry(), Budgets(max_restarts=1))

    class Fixed:
        """The same model (name and parameters) once its bug is fixed."""

        name = model.name
        params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

        async def __call__(
            self,
            *,
            system: SystemPrompt,
            messages: list[Message],
            tools: list[ToolDefinition],
        ) -> ModelReply:
            return ModelReply(content=[{"type": "text", "text": "all good"}])

    async with Supervisor(tether.FileStore(tmp_path), model=Fixed()) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        await sup.retry(RUN, by="ops", note="model fixed")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    assert view.final_text == "all good"
    (retried,) = of_type(await read_events(tmp_path, RUN), Retried)
    assert (retried.by, retried.note) == ("ops", "model fixed")


async def test_crashes_in_a_row_are_counted_across_processes(tmp_path: pathlib.Path) -> None:
    first = ExplodingModel(hang_at=3)  # crashes twice, then the process stops during call 3
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=first,
        max_restarts=100,
        restart_backoff=0.01,
        drain_timeout=0.1,  # the model call hangs: the drain gives up on it
    ) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            await first.hanging.wait()
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, Resumed)) == 2
    # Leaving the supervisor while the model call hung is a graceful stop, not a crash.
    assert isinstance(events[-1], Suspended)

    second = ExplodingModel()
    async with Supervisor(
        tether.FileStore(tmp_path), model=second, max_restarts=2, restart_backoff=0.01
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)

    # Two crashes were counted before; the suspension was not; this process adds one.
    assert "stopped 3 times in a row without progress (limit 2)" in view.reason
    events = await read_events(tmp_path, RUN)
    resumes = of_type(events, Resumed)
    assert [(e.attempt, e.charged) for e in resumes] == [
        (1, True),
        (2, True),
        (3, False),
        (4, True),
    ]
    assert resumes[2].cause == "shutdown"
    assert second.calls == 1
    assert of_type(events, ToolStarted) == []


async def test_progress_between_crashes_starts_the_count_again(tmp_path: pathlib.Path) -> None:
    class FlakyModel:
        """Every other call crashes the run's task; the calls in between answer with a step."""

        name = "flaky"
        params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

        def __init__(self) -> None:
            self.calls = 0

        async def __call__(
            self,
            *,
            system: SystemPrompt,
            messages: list[Message],
            tools: list[ToolDefinition],
        ) -> ModelReply:
            self.calls += 1
            if self.calls % 2:
                raise RuntimeError("flaky")
            answered = sum(1 for m in messages if m["role"] == "assistant")
            if answered == 6:
                return ModelReply(content=[{"type": "text", "text": "finished"}])
            n = f"s{answered}"
            return ModelReply(content=[use(f"toolu_{n}", "step", {"name": n})])

    ran: list[str] = []
    view = await finish(
        tmp_path,
        FlakyModel(),
        step_tools(ran),
        Budgets(max_restarts=1),
        restart_backoff=0.001,
    )
    # Seven crashes, but never two in a row without progress: the run finishes.
    assert view.status is RunStatus.DONE
    assert view.restarts == 7
    assert ran == [f"s{i}" for i in range(6)]


async def test_an_approval_after_the_runs_deadline_does_not_run_the_tool(
    tmp_path: pathlib.Path,
) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel([[use("toolu_g", "gated_step", {"name": "g"})], "done"])
    clock = VirtualClock()
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=step_tools(ran), clock=clock
    ) as sup:
        await sup.start(RUN, "go", budgets=Budgets(deadline_s=0.2))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        clock.advance(0.4)
        with anyio.fail_after(WAIT):  # the timer saw the deadline pass
            while (await sup.inspect(RUN)).status is not RunStatus.FAILED:
                await anyio.sleep(0.02)
        # The deadline fired while the run was parked: the late approval is refused.
        with pytest.raises(RunStateError, match=r"already finished \(failed\)"):
            await sup.decide(RUN, "toolu_g", approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED
        view = await sup.inspect(RUN)
    assert view.reason == "deadline of 0.2 s passed while waiting_for_approval"
    assert ran == []
    assert model.calls == 1
    await assert_failed_in_journal(tmp_path, view.reason)


async def test_a_parked_run_fails_at_its_deadline_with_nobody_touching_it(
    tmp_path: pathlib.Path,
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(approval=True)
    async def send(text: str) -> str:
        """Send a text."""
        return "sent"

    model = tether.ScriptedModel([[tether.ScriptedModel.tool_use("t1", "send", {"text": "x"})]])
    budgets = tether.Budgets(deadline_s=3 * 3600)
    clock = VirtualClock(autojump_threshold=0)  # nobody touches it: time jumps to the deadline
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools, clock=clock) as sup:
        await sup.start("run-1", "go", budgets=budgets)
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        with anyio.fail_after(WAIT):
            while (await sup.inspect("run-1")).status is not RunStatus.FAILED:
                await anyio.sleep(0.05)
        view = await sup.inspect("run-1")
    assert "deadline of 10800 s passed while waiting_for_approval" in view.reason
    assert clock.time() == (await read_events(tmp_path, "run-1"))[0].at + 3 * 3600


async def test_restart_backoff_doubles_with_jitter_on_an_injected_clock(
    tmp_path: pathlib.Path,
) -> None:
    class Exploding:
        name = "exploding"
        params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

        async def __call__(
            self,
            *,
            system: SystemPrompt,
            messages: list[Message],
            tools: list[ToolDefinition],
        ) -> ModelReply:
            raise RuntimeError("model exploded")

    sup = Supervisor(
        tether.FileStore(tmp_path),
        model=Exploding(),
        max_restarts=4,
        restart_backoff=1.0,
        max_backoff=5.0,
        clock=VirtualClock(autojump_threshold=0),
        jitter=lambda: 0.5,  # 0.5 + 0.5 = no jitter at all
    )
    async with sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    # One wait before each restart, on the virtual clock (nothing else moves it): the journal's
    # times are the delays exactly; the fifth restart exceeds the limit of four.
    events = await read_events(tmp_path, RUN)
    times = [e.at for e in events if isinstance(e, RunStarted | Resumed)]
    assert [b - a for a, b in itertools.pairwise(times)] == [1.0, 2.0, 4.0, 5.0, 5.0]


async def test_a_run_without_budgets_stops_at_the_default_model_call_limit(
    tmp_path: pathlib.Path,
) -> None:
    """A loop that never ends (the model asks for one more step forever) is capped."""

    def forever(messages: list[Message]) -> Any:
        n = sum(1 for m in messages if m["role"] == "assistant")
        return [use(f"toolu_{n}", "step", {"name": str(n)})]

    ran: list[str] = []
    model = tether.ScriptedModel(forever)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools(ran)) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=60) is RunStatus.FAILED
        view = await sup.inspect(RUN)
    assert tether.journal.DEFAULT_MAX_MODEL_CALLS == 100
    assert view.reason == "model call budget exhausted: 100 of 100"
    assert model.calls == 100
    assert len(ran) == 100


async def test_no_model_call_limit_is_unlimited_on_purpose(tmp_path: pathlib.Path) -> None:
    def chatty(messages: list[Message]) -> Any:
        n = sum(1 for m in messages if m["role"] == "assistant")
        return "enough" if n == 120 else [use(f"toolu_{n}", "step", {"name": str(n)})]

    view = await finish(
        tmp_path, tether.ScriptedModel(chatty), step_tools([]), Budgets(max_model_calls=None)
    )
    assert view.status is RunStatus.DONE
    assert view.model_calls == 121


async def test_a_run_that_failed_on_a_budget_is_reopened_with_more(tmp_path: pathlib.Path) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel([*steps("a", "b", "c"), "done"])
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools(ran)) as sup:
        await sup.start(RUN, "go", budgets=Budgets(max_model_calls=2))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED
        with pytest.raises(
            RunStateError, match="would fail again at once: model call budget exhausted: 2 of 2"
        ):
            await sup.retry(RUN, by="ops")
        await sup.retry(RUN, by="ops", note="worth two more", budgets=Budgets(max_model_calls=4))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    assert ran == ["a", "b", "c"]
    assert view.final_text == "done"
    assert view.model_calls == 4
    events = await read_events(tmp_path, RUN)
    (retried,) = of_type(events, Retried)
    assert retried.budgets == Budgets(max_model_calls=4)
    assert [f.status for f in of_type(events, RunFinished)] == ["failed", "done"]


async def test_a_running_supervisor_takes_up_a_failed_run_retried_elsewhere(
    tmp_path: pathlib.Path,
) -> None:
    ran: list[str] = []
    model = tether.ScriptedModel([*steps("a", "b"), "done"])
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=step_tools(ran), sweep_interval=0.05
    ) as sup:
        await sup.start(RUN, "go", budgets=Budgets(max_model_calls=1))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED
        # What `tether retry RUN --extend max_model_calls=2` appends, from another process.
        async with tether.FileStore(tmp_path) as other, await other.open(RUN) as journal:
            await journal.append([Retried(by="ops", budgets=Budgets(max_model_calls=3))])
        with anyio.fail_after(WAIT):
            while (await sup.inspect(RUN)).status is not RunStatus.DONE:
                await anyio.sleep(0.02)
    assert ran == ["a", "b"]
