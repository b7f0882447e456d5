"""The agent loop end to end: conversation shape, journal ordering, concurrency, tool errors."""

from __future__ import annotations

import pathlib
from typing import Any

import anyio
import pytest

import tether
import tether.testing
from tether.journal import AnyEvent, ModelResponse, RunFinished, RunStarted, ToolResult, ToolStarted
from tether.models import Message, ModelReply, SystemPrompt, ToolDefinition
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, RecordingModel, of_type, read_events, results_by_id, tool_results

use = tether.ScriptedModel.tool_use
text = tether.ScriptedModel.text


def ticket_tools(log: list[str] | None = None) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def get_ticket(ticket_id: str) -> dict[str, Any]:
        """Fetch a support ticket."""
        if log is not None:
            log.append(ticket_id)
        return {"id": ticket_id, "status": "open"}

    return tools


def call_ids(event: ModelResponse) -> list[str]:
    return [b["id"] for b in event.message["content"] if b.get("type") == "tool_use"]


async def test_run_with_tool_calls_finishes_done(tmp_path: pathlib.Path) -> None:
    seen: list[str] = []
    model = tether.ScriptedModel(
        [
            [use("toolu_01", "get_ticket", {"ticket_id": "K-1"})],
            [text("One more."), use("toolu_02", "get_ticket", {"ticket_id": "K-2"})],
            "Both tickets are open.",
        ]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=ticket_tools(seen)) as sup:
        await sup.start("run-1", "check my tickets", system="You help with tickets.")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    assert seen == ["K-1", "K-2"]
    assert view.status is RunStatus.DONE
    assert view.reason == ""
    assert view.pending == ()
    assert view.final_text == "Both tickets are open."

    messages = view.messages
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert messages[0] == {"role": "user", "content": "check my tickets"}
    for index, call_id, ticket in ((2, "toolu_01", "K-1"), (4, "toolu_02", "K-2")):
        (block,) = tool_results(messages[index])
        assert block["tool_use_id"] == call_id
        assert block["is_error"] is False
        assert '"id":"' + ticket + '"' in block["content"]
    assert messages[-1]["content"] == [text("Both tickets are open.")]


async def test_journal_obeys_intent_before_act(tmp_path: pathlib.Path) -> None:
    store = tether.FileStore(tmp_path)
    seen_by_tool: list[list[AnyEvent]] = []
    seen_by_model: list[list[AnyEvent]] = []

    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(q: str, ctx: tether.ToolContext) -> str:
        """Look something up."""
        seen_by_tool.append(await store.read(ctx.run_id))
        return f"found {q}"

    inner = tether.ScriptedModel(
        [
            [use("toolu_a", "lookup", {"q": "a"}), use("toolu_b", "lookup", {"q": "b"})],
            [use("toolu_c", "lookup", {"q": "c"})],
            "done",
        ]
    )

    class PeekingModel(RecordingModel):
        async def __call__(
            self,
            *,
            system: SystemPrompt,
            messages: list[Message],
            tools: list[ToolDefinition],
        ) -> ModelReply:
            seen_by_model.append(await store.read("run-1"))
            return await super().__call__(system=system, messages=messages, tools=tools)

    async with Supervisor(store, model=PeekingModel(inner), tools=tools) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE

    events = await read_events(tmp_path, "run-1")
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[-1], RunFinished)
    assert events[-1].status == "done"
    responses = of_type(events, ModelResponse)
    assert len(responses) == 3
    for response, following in zip(responses, [*responses[1:], None], strict=True):
        for call_id in call_ids(response):
            (started,) = [e for e in events if isinstance(e, ToolStarted) and e.call_id == call_id]
            (result,) = [e for e in events if isinstance(e, ToolResult) and e.call_id == call_id]
            assert response.seq < started.seq < result.seq
            if following is not None:
                assert result.seq < following.seq

    # From inside each tool: its model response and its own tool_started were already on disk.
    assert len(seen_by_tool) == 3
    for snapshot in seen_by_tool:
        assert any(isinstance(e, ToolStarted) for e in snapshot)
        started_ids = {e.call_id for e in snapshot if isinstance(e, ToolStarted)}
        last_response = of_type(snapshot, ModelResponse)[-1]
        assert set(call_ids(last_response)) & started_ids
        assert not any(e.seq > last_response.seq and isinstance(e, ModelResponse) for e in snapshot)
    # From inside the model: every result of the previous turn was on disk before it was asked.
    assert len(seen_by_model) == 3
    assert isinstance(seen_by_model[0][-1], RunStarted)
    for snapshot in seen_by_model[1:]:
        last_response = of_type(snapshot, ModelResponse)[-1]
        recorded = {e.call_id for e in snapshot if isinstance(e, ToolResult)}
        assert set(call_ids(last_response)) <= recorded
        assert isinstance(snapshot[-1], ToolResult)


async def test_tool_calls_of_one_turn_run_concurrently(tmp_path: pathlib.Path) -> None:
    left_here, right_here = anyio.Event(), anyio.Event()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def left() -> str:
        """Meet right."""
        left_here.set()
        with anyio.fail_after(5):
            await right_here.wait()
        return "left met right"

    @tools.tool(policy="rerun")
    async def right() -> str:
        """Meet left."""
        right_here.set()
        with anyio.fail_after(5):
            await left_here.wait()
        return "right met left"

    model = tether.ScriptedModel([[use("toolu_l", "left"), use("toolu_r", "right")], "met"])
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start("run-1", "meet")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    results = results_by_id(view.messages)
    assert results["toolu_l"]["content"] == "left met right"
    assert results["toolu_r"]["content"] == "right met left"
    assert not results["toolu_l"]["is_error"]
    assert not results["toolu_r"]["is_error"]
    # One results message carries both, in the order the model asked for them.
    (results_message,) = [m for m in view.messages if m["role"] == "user"][1:]
    assert [b["tool_use_id"] for b in tool_results(results_message)] == ["toolu_l", "toolu_r"]

    events = await read_events(tmp_path, "run-1")
    starts = of_type(events, ToolStarted)
    results_ = of_type(events, ToolResult)
    assert sorted(e.call_id for e in starts) == ["toolu_l", "toolu_r"]
    assert sorted(e.call_id for e in results_) == ["toolu_l", "toolu_r"]
    assert all(e.attempt == 1 for e in starts)
    # Both started before either finished: they overlapped.
    assert max(e.seq for e in starts) < min(e.seq for e in results_)
    assert view.tool_calls == 2


async def test_unknown_tool_and_invalid_arguments_become_error_results(
    tmp_path: pathlib.Path,
) -> None:
    seen: list[str] = []
    model = RecordingModel(
        tether.ScriptedModel(
            [
                [
                    use("toolu_01", "delete_everything", {}),
                    use("toolu_02", "get_ticket", {"ticket_id": 5}),
                    use("toolu_03", "get_ticket", {}),
                    use("toolu_04", "get_ticket", {"ticket_id": "K", "extra": 1}),
                ],
                "sorry",
            ]
        )
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=ticket_tools(seen)) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    assert seen == []
    assert view.tool_calls == 0
    events = await read_events(tmp_path, "run-1")
    assert of_type(events, ToolStarted) == []

    # What the model was sent on its second call.
    sent = results_by_id(model.requests[1]["messages"])
    assert sent == results_by_id(view.messages)
    assert set(sent) == {"toolu_01", "toolu_02", "toolu_03", "toolu_04"}
    assert all(block["is_error"] is True for block in sent.values())
    assert "delete_everything" in sent["toolu_01"]["content"]
    assert "unknown tool" in sent["toolu_01"]["content"]
    for call_id in ("toolu_02", "toolu_03", "toolu_04"):
        assert "invalid arguments for get_ticket" in sent[call_id]["content"]
    assert "ticket_id" in sent["toolu_02"]["content"]
    assert "ticket_id" in sent["toolu_03"]["content"]
    assert "extra" in sent["toolu_04"]["content"]


async def test_tool_exception_becomes_error_result(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        raise ValueError(f"ticket {ticket_id} is locked")

    model = tether.ScriptedModel(
        [[use("toolu_01", "close_ticket", {"ticket_id": "K"})], "could not close it"]
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start("run-1", "close K")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    block = results_by_id(view.messages)["toolu_01"]
    assert block["is_error"] is True
    assert block["content"] == "ValueError: ticket K is locked"
    events = await read_events(tmp_path, "run-1")
    (started,) = of_type(events, ToolStarted)
    assert (started.call_id, started.name, started.attempt) == ("toolu_01", "close_ticket", 1)
    (result,) = of_type(events, ToolResult)
    assert result.ok is False
    assert view.final_text == "could not close it"


async def test_starting_an_existing_run_raises(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel(["hi"])
    async with Supervisor(tether.FileStore(tmp_path), model=model) as sup:
        await sup.start("run-1", "hello")
        with pytest.raises(tether.RunExistsError):
            await sup.start("run-1", "hello again")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        with pytest.raises(tether.InvalidRunIdError):
            await sup.start("../escape", "hello")
    async with Supervisor(tether.FileStore(tmp_path), model=model) as sup:
        with pytest.raises(tether.RunExistsError):
            await sup.start("run-1", "hello")
        assert (await sup.inspect("run-1")).final_text == "hi"
    assert model.calls == 1


async def test_prompt_as_a_list_of_messages(tmp_path: pathlib.Path) -> None:
    prompt: list[Message] = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": [text("4.")]},
        {"role": "user", "content": [{"type": "text", "text": "And times 3?"}]},
    ]
    # The scripted answer is chosen by the number of assistant messages: one is in the prompt.
    model = RecordingModel(tether.ScriptedModel(["(never asked)", "12."]))
    async with Supervisor(tether.FileStore(tmp_path), model=model) as sup:
        await sup.start("run-1", prompt, system="Be brief.")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    assert model.requests[0]["messages"] == prompt
    assert model.requests[0]["system"] == "Be brief."
    assert model.requests[0]["tools"] == []
    assert view.messages[:3] == prompt
    assert view.final_text == "12."
    (started,) = of_type(await read_events(tmp_path, "run-1"), RunStarted)
    assert started.messages == prompt


async def test_counters_match_the_journal_and_the_model(tmp_path: pathlib.Path) -> None:
    inner = tether.ScriptedModel(
        [
            [use("toolu_01", "get_ticket", {"ticket_id": "A"})],
            [use("toolu_02", "get_ticket", {"ticket_id": "B"}), use("toolu_03", "nope")],
            "done",
        ]
    )
    model = RecordingModel(inner)
    tools = ticket_tools()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start("run-1", "go", system="sys")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")

    events = await read_events(tmp_path, "run-1")
    responses = of_type(events, ModelResponse)
    assert inner.calls == len(responses) == view.model_calls == 3
    assert view.tool_calls == len(of_type(events, ToolStarted)) == 2  # the unknown one never ran
    assert view.input_tokens == sum(r.usage.input_tokens for r in responses) > 0
    assert view.output_tokens == sum(r.usage.output_tokens for r in responses) > 0
    assert view.restarts == 0
    assert view.events == len(events)
    assert model.requests[0]["tools"] == tools.definitions()
    assert all(r["system"] == "sys" for r in model.requests)


async def test_a_large_tool_output_reaches_the_model_whole(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def dump_logs() -> str:
        """Return the full logs."""
        return "log line\n" * 1000

    model = RecordingModel(tether.ScriptedModel([[use("toolu_01", "dump_logs")], "read them"]))
    store = tether.FileStore(tmp_path, blob_threshold=1000)
    async with Supervisor(store, model=model, tools=tools) as sup:
        await sup.start("run-1", "show logs")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
    (result,) = of_type(await read_events(tmp_path, "run-1"), ToolResult)
    assert result.blob is not None  # kept beside the journal, as intended
    sent = results_by_id(model.requests[1]["messages"])["toolu_01"]
    assert sent["content"] == "log line\n" * 1000


async def test_a_call_id_reused_in_a_later_turn_gets_an_id_of_its_own(
    tmp_path: pathlib.Path,
) -> None:
    """Call ids number per turn (``call_0`` each time): both refunds happen, under two keys."""
    from . import _per_turn_ids

    scenario = _per_turn_ids.scenario(tmp_path)
    model, tools = scenario.build()
    async with Supervisor(tether.FileStore(tmp_path / "store"), model=model, tools=tools) as sup:
        await sup.start("run-ids", "refund both orders")
        assert await sup.wait("run-ids", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-ids")
    assert sorted(scenario.ledger()) == ["refund o-1", "refund o-2"]
    events = await read_events(tmp_path / "store", "run-ids")
    ids = [
        b["id"]
        for e in of_type(events, ModelResponse)
        for b in e.message["content"]
        if b["type"] == "tool_use"
    ]
    assert ids == ["call_0", "call_0-t2"]
    assert list(results_by_id(view.messages)) == ["call_0", "call_0-t2"]


@pytest.mark.slow
def test_per_turn_call_ids_survive_a_kill_at_every_point() -> None:
    report = tether.testing.assert_crash_safe(
        "tests.supervisor._per_turn_ids:scenario", min_points=6
    )
    assert report.duplicates == 0
    assert report.differing == 0
    assert report.baseline.ledger == {"refund o-1": 1, "refund o-2": 1}
