"""Dangling calls (started, no result) on resume, per replay policy, and escalations.

A dangling call is what a process leaves behind when it dies while a tool runs. These tests
write such a journal by hand, then let a new Supervisor's sweep resume it.
"""

from __future__ import annotations

import pathlib
from typing import Any

import anyio
import pytest

import tether
from tether._errors import RunStateError
from tether.journal import Escalated, ModelResponse, Resolved, Resumed, ToolResult, ToolStarted
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, craft_dangling, of_type, read_events, result_of, results_by_id

use = tether.ScriptedModel.tool_use
RUN = "run-1"
CALL = "toolu_01"


def script(name: str, args: dict[str, Any]) -> tether.ScriptedModel:
    return tether.ScriptedModel([[use(CALL, name, args)], "all done"])


class Ledger:
    """What tools were called with: one entry per real run of a tool body."""

    def __init__(self) -> None:
        self.attempts: list[int] = []
        self.keys: list[str] = []
        self.verified: list[str] = []

    def note(self, ctx: tether.ToolContext) -> None:
        self.attempts.append(ctx.attempt)
        self.keys.append(ctx.idempotency_key)


async def resume(
    root: pathlib.Path,
    model: tether.ScriptedModel,
    tools: tether.ToolRegistry,
    want: RunStatus,
) -> Any:
    async with Supervisor(tether.FileStore(root), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is want
        return await sup.inspect(RUN)


async def test_rerun_runs_a_dangling_call_again_as_attempt_2(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def fetch(url: str, ctx: tether.ToolContext) -> str:
        """Fetch a page."""
        ledger.note(ctx)
        return f"page at {url}"

    await craft_dangling(
        tmp_path,
        RUN,
        model=script("fetch", {"url": "u"}),
        tools=tools,
        block=use(CALL, "fetch", {"url": "u"}),
    )
    model = script("fetch", {"url": "u"})
    view = await resume(tmp_path, model, tools, RunStatus.DONE)

    assert ledger.attempts == [2]
    assert model.calls == 1  # only the answer after the result; the first one is replayed
    assert view.model_calls == 2
    assert view.restarts == 1
    assert view.final_text == "all done"
    assert results_by_id(view.messages)[CALL] == {
        "type": "tool_result",
        "tool_use_id": CALL,
        "content": "page at u",
        "is_error": False,
    }
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1, 2]
    assert len(of_type(events, Resumed)) == 1


async def test_idempotency_key_is_the_same_on_every_attempt(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    hang = True
    reached = anyio.Event()
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def refund(order: str, ctx: tether.ToolContext) -> str:
        """Refund an order."""
        ledger.note(ctx)
        if hang:  # this attempt "dies": the supervisor is shut down while it runs
            reached.set()
            await anyio.sleep_forever()
        return f"refunded {order}"

    args = {"order": "o-7"}
    await craft_dangling(
        tmp_path, RUN, model=script("refund", args), tools=tools, block=use(CALL, "refund", args)
    )
    # A shutdown that does not wait for the call (drain_timeout=0): it is cut off mid-way.
    async with Supervisor(
        tether.FileStore(tmp_path), model=script("refund", args), tools=tools, drain_timeout=0
    ):
        with anyio.fail_after(WAIT):
            await reached.wait()
    hang = False
    model = script("refund", args)
    view = await resume(tmp_path, model, tools, RunStatus.DONE)

    assert ledger.attempts == [2, 3]
    assert ledger.keys == [f"{RUN}:{CALL}"] * 2
    assert model.calls == 1
    assert results_by_id(view.messages)[CALL]["content"] == "refunded o-7"
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1, 2, 3]
    assert view.restarts == 1  # the crash; the shutdown that cut the call off is no restart


def verify_tools(ledger: Ledger, landed: dict[str, Any] | None) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    async def send_email_landed(to: str, ctx: tether.ToolContext) -> dict[str, Any] | None:
        ledger.verified.append(ctx.idempotency_key)
        return landed

    @tools.tool(policy="verify", verify=send_email_landed)
    async def send_email(to: str, ctx: tether.ToolContext) -> dict[str, Any]:
        """Send an email."""
        ledger.note(ctx)
        return {"message_id": "m-new", "to": to}

    return tools


async def test_verify_that_finds_the_call_landed_records_its_result(
    tmp_path: pathlib.Path,
) -> None:
    ledger = Ledger()
    tools = verify_tools(ledger, {"message_id": "m-old"})
    args = {"to": "a@example.com"}
    await craft_dangling(
        tmp_path,
        RUN,
        model=script("send_email", args),
        tools=tools,
        block=use(CALL, "send_email", args),
    )
    model = script("send_email", args)
    view = await resume(tmp_path, model, tools, RunStatus.DONE)

    assert ledger.attempts == []  # not sent again
    assert ledger.verified == [f"{RUN}:{CALL}"]
    assert model.calls == 1
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1]
    result = result_of(events, CALL)
    assert result.ok is True
    assert result.content == {"message_id": "m-old"}
    block = results_by_id(view.messages)[CALL]
    assert block["content"] == '{"message_id":"m-old"}'
    assert block["is_error"] is False


async def test_verify_that_finds_nothing_runs_the_call_again_with_the_same_key(
    tmp_path: pathlib.Path,
) -> None:
    ledger = Ledger()
    tools = verify_tools(ledger, None)
    args = {"to": "a@example.com"}
    await craft_dangling(
        tmp_path,
        RUN,
        model=script("send_email", args),
        tools=tools,
        block=use(CALL, "send_email", args),
    )
    model = script("send_email", args)
    view = await resume(tmp_path, model, tools, RunStatus.DONE)

    assert ledger.verified == [f"{RUN}:{CALL}"]
    assert ledger.attempts == [2]
    assert ledger.keys == [f"{RUN}:{CALL}"]
    assert model.calls == 1
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1, 2]
    assert result_of(events, CALL).content == {"message_id": "m-new", "to": "a@example.com"}
    assert view.final_text == "all done"


def charge_tools(ledger: Ledger, *, hang: list[bool] | None = None) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool  # policy: escalate, the default
    async def charge(amount: int, ctx: tether.ToolContext) -> dict[str, Any]:
        """Charge the customer's card."""
        ledger.note(ctx)
        if hang and hang[0]:
            await anyio.sleep_forever()
        return {"charge_id": f"ch_{ctx.attempt}", "amount": amount}

    return tools


async def escalated_run(root: pathlib.Path, tools: tether.ToolRegistry) -> None:
    args = {"amount": 100}
    await craft_dangling(
        root, RUN, model=script("charge", args), tools=tools, block=use(CALL, "charge", args)
    )


async def test_escalate_stops_the_run_for_a_person(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    tools = charge_tools(ledger)
    await escalated_run(tmp_path, tools)
    model = script("charge", {"amount": 100})
    view = await resume(tmp_path, model, tools, RunStatus.NEEDS_ATTENTION)

    assert ledger.attempts == []
    assert model.calls == 0
    assert "charge" in view.reason
    assert "outcome unknown" in view.reason
    assert CALL in view.reason
    assert view.pending == (CALL,)
    events = await read_events(tmp_path, RUN)
    (escalated,) = of_type(events, Escalated)
    assert escalated.call_id == CALL
    assert "outcome unknown" in escalated.reason
    assert events[-1] == escalated

    # A later process finds it as it was and appends nothing.
    again = await resume(
        tmp_path, script("charge", {"amount": 100}), tools, RunStatus.NEEDS_ATTENTION
    )
    assert again.pending == (CALL,)
    assert len(await read_events(tmp_path, RUN)) == len(events)
    assert ledger.attempts == []


async def test_resolve_succeeded_gives_the_model_the_persons_result(
    tmp_path: pathlib.Path,
) -> None:
    ledger = Ledger()
    tools = charge_tools(ledger)
    await escalated_run(tmp_path, tools)
    model = script("charge", {"amount": 100})
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        await sup.resolve(
            RUN, CALL, outcome="succeeded", result={"charge_id": "ch_bank"}, by="priya", note="seen"
        )
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ledger.attempts == []
    assert model.calls == 1
    block = results_by_id(view.messages)[CALL]
    assert block == {
        "type": "tool_result",
        "tool_use_id": CALL,
        "content": '{"charge_id":"ch_bank"}',
        "is_error": False,
    }
    events = await read_events(tmp_path, RUN)
    (resolved,) = of_type(events, Resolved)
    assert (resolved.outcome, resolved.by, resolved.note) == ("succeeded", "priya", "seen")
    assert resolved.seq < result_of(events, CALL).seq
    assert view.pending == ()


async def test_resolve_failed_gives_the_model_an_error_with_the_note(
    tmp_path: pathlib.Path,
) -> None:
    ledger = Ledger()
    tools = charge_tools(ledger)
    await escalated_run(tmp_path, tools)
    model = script("charge", {"amount": 100})
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        await sup.resolve(RUN, CALL, outcome="failed", by="priya", note="the bank refused it")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ledger.attempts == []
    block = results_by_id(view.messages)[CALL]
    assert block["is_error"] is True
    assert "the bank refused it" in block["content"]
    assert model.calls == 1


async def test_resolve_retry_runs_the_call_again(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    tools = charge_tools(ledger)
    await escalated_run(tmp_path, tools)
    model = script("charge", {"amount": 100})
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        await sup.resolve(RUN, CALL, outcome="retry", by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert ledger.attempts == [2]
    assert ledger.keys == [f"{RUN}:{CALL}"]
    assert results_by_id(view.messages)[CALL]["content"] == '{"charge_id":"ch_2","amount":100}'
    assert model.calls == 1
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1, 2]


async def test_a_retried_call_that_dangles_again_escalates_again(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    hang = [True]
    tools = charge_tools(ledger, hang=hang)
    await escalated_run(tmp_path, tools)
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=script("charge", {"amount": 100}),
        tools=tools,
        drain_timeout=0,  # the retried attempt is cut off by the shutdown
    ) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        await sup.resolve(RUN, CALL, outcome="retry", by="priya")
        with anyio.fail_after(WAIT):
            while ledger.attempts != [2]:
                await anyio.sleep(0.01)
    # The retried attempt was cut off: its outcome is unknown too.
    hang[0] = False
    view = await resume(
        tmp_path, script("charge", {"amount": 100}), tools, RunStatus.NEEDS_ATTENTION
    )
    assert "attempt 2" in view.reason
    assert view.pending == (CALL,)
    assert ledger.attempts == [2]
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, Escalated)) == 2


async def test_resolving_a_call_that_is_not_escalated_is_refused(tmp_path: pathlib.Path) -> None:
    ledger = Ledger()
    tools = charge_tools(ledger)
    await escalated_run(tmp_path, tools)
    model = script("charge", {"amount": 100})
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        before = len(await read_events(tmp_path, RUN))
        with pytest.raises(RunStateError, match="toolu_nope"):
            await sup.resolve(RUN, "toolu_nope", outcome="succeeded", result=1)
        with pytest.raises(ValueError, match="outcome"):
            await sup.resolve(RUN, CALL, outcome="maybe")  # type: ignore[arg-type]
        assert len(await read_events(tmp_path, RUN)) == before
        await sup.resolve(RUN, CALL, outcome="failed", note="no")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        with pytest.raises(RunStateError):  # answered already, and the call has its result
            await sup.resolve(RUN, CALL, outcome="succeeded", result=1)

    # A call that finished normally was never escalated.
    tools2 = tether.ToolRegistry()

    @tools2.tool(policy="rerun")
    async def ping() -> str:
        """Ping."""
        return "pong"

    async with Supervisor(
        tether.FileStore(tmp_path / "other"),
        model=tether.ScriptedModel([[use("toolu_p", "ping")], "ok"]),
        tools=tools2,
    ) as sup:
        await sup.start("run-2", "ping")
        assert await sup.wait("run-2", timeout=WAIT) is RunStatus.DONE
        with pytest.raises(RunStateError):
            await sup.resolve("run-2", "toolu_p", outcome="retry")


async def test_no_model_call_is_repeated_on_resume(tmp_path: pathlib.Path) -> None:
    """A run resumed after three answers asks only for what is still missing."""
    ledger = Ledger()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(n: int, ctx: tether.ToolContext) -> int:
        """Do step n."""
        ledger.note(ctx)
        return n * 10

    answers: list[Any] = [
        [use("toolu_1", "step", {"n": 1})],
        [use("toolu_2", "step", {"n": 2})],
        [use("toolu_3", "step", {"n": 3})],
        "finished",
    ]
    first = tether.ScriptedModel(answers)
    stop_at_3 = anyio.Event()

    hang_tools = tether.ToolRegistry()

    @hang_tools.tool(name="step", policy="rerun")
    async def step_hangs_at_3(n: int, ctx: tether.ToolContext) -> int:
        """Do step n."""
        if n == 3:
            stop_at_3.set()
            await anyio.sleep_forever()
        return n * 10

    async with Supervisor(
        tether.FileStore(tmp_path), model=first, tools=hang_tools, drain_timeout=0
    ) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            await stop_at_3.wait()
    assert first.calls == 3

    second = tether.ScriptedModel(answers)
    view = await resume(tmp_path, second, tools, RunStatus.DONE)
    assert second.calls == 1
    assert ledger.attempts == [2]  # step 3 again; steps 1 and 2 replayed from the journal
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, ModelResponse)) == first.calls + second.calls == view.model_calls
    assert [r.content for r in of_type(events, ToolResult)] == [10, 20, 30]
