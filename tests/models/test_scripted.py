"""``ScriptedModel``: answers chosen by the conversation, never by the object's own state."""

from __future__ import annotations

import copy
import json
from typing import Any

import anyio
import pytest

from tether._errors import ModelResponseError
from tether.journal import Usage
from tether.models import ContentBlock, Message, ScriptedModel, ToolDefinition, tool_uses

text = ScriptedModel.text
tool_use = ScriptedModel.tool_use

SCRIPT: list[str | list[ContentBlock]] = [
    [text("Looking it up."), tool_use("toolu_1", "search", {"q": "tether"})],
    "It is a library.",
]


def user(content: Any) -> Message:
    return {"role": "user", "content": content}


def assistant(content: Any) -> Message:
    return {"role": "assistant", "content": content}


def conversation(turns: int) -> list[Message]:
    """A conversation holding ``turns`` assistant messages, ending with a user message."""
    messages = [user("What is tether?")]
    for i in range(turns):
        messages.append(assistant([tool_use(f"toolu_{i}", "search", {"q": str(i)})]))
        messages.append(
            user([{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "found"}])
        )
    return messages


async def ask(model: ScriptedModel, messages: list[Message]) -> list[Any]:
    reply = await model(system=None, messages=messages, tools=[])
    return reply.content


async def test_answer_is_chosen_by_assistant_message_count() -> None:
    model = ScriptedModel(SCRIPT)
    first = await model(system="be brief", messages=conversation(0), tools=[])
    assert first.content == [
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "tether"}},
    ]
    assert first.stop_reason == "tool_use"
    second = await model(system="be brief", messages=conversation(1), tools=[])
    assert second.content == [{"type": "text", "text": "It is a library."}]
    assert second.stop_reason == "end_turn"
    # Asking again at an earlier point gives that point's answer: no hidden cursor.
    assert await ask(model, conversation(0)) == first.content


async def test_a_fresh_instance_answers_like_the_first() -> None:
    # What a resumed process does: a new object, the same journaled conversation.
    before_crash = ScriptedModel(SCRIPT)
    await ask(before_crash, conversation(0))
    after_restart = ScriptedModel(SCRIPT)
    for turns in (1, 0, 1):
        assert await ask(after_restart, conversation(turns)) == await ask(
            before_crash, conversation(turns)
        )


async def test_calls_counts_served_calls_only() -> None:
    model = ScriptedModel(SCRIPT)
    assert model.calls == 0
    await ask(model, conversation(0))
    await ask(model, conversation(1))
    await ask(model, conversation(1))
    assert model.calls == 3
    with pytest.raises(ModelResponseError):
        await ask(model, conversation(2))
    assert model.calls == 3


async def test_string_is_shorthand_for_one_text_block() -> None:
    short = ScriptedModel(["hi"])
    long = ScriptedModel([[text("hi")]])
    assert await ask(short, conversation(0)) == [{"type": "text", "text": "hi"}]
    assert short.params == long.params


async def test_running_past_the_script_is_a_response_error() -> None:
    model = ScriptedModel(SCRIPT, name="demo")
    with pytest.raises(ModelResponseError) as info:
        await ask(model, conversation(2))
    assert info.value.model == "demo"
    assert info.value.reason.startswith("script has 2 responses; call 2")


async def test_malformed_scripted_answer_is_caught_when_served() -> None:
    no_id = {"type": "tool_use", "name": "search", "input": {}}
    model = ScriptedModel([[text("ok"), no_id]])  # type: ignore[list-item]  # on purpose
    with pytest.raises(ModelResponseError) as info:
        await ask(model, conversation(0))
    assert "block 1 (tool_use): 'id'" in info.value.reason
    assert model.calls == 0


async def test_function_script_sync_and_async() -> None:
    seen: list[list[Message]] = []

    def answer(messages: list[Message]) -> str | list[ContentBlock]:
        seen.append(messages)
        messages.clear()  # the function gets a copy: the caller's list is untouched
        return "done" if len(seen) > 1 else [tool_use("toolu_9", "search", {})]

    model = ScriptedModel(answer, name="fn")
    messages = conversation(0)
    assert (await ask(model, messages))[0]["type"] == "tool_use"
    assert messages == conversation(0)
    assert await ask(model, messages) == [text("done")]
    assert model.params == {"script": "callable"}
    assert model.calls == 2

    async def slow_answer(messages: list[Message]) -> str | list[ContentBlock]:
        await anyio.sleep(0)
        return f"{len(messages)} messages"

    assert await ask(ScriptedModel(slow_answer), conversation(1)) == [text("3 messages")]


async def test_function_answer_is_checked() -> None:
    model = ScriptedModel(lambda messages: [{"type": "text"}])  # type: ignore[list-item]
    with pytest.raises(ModelResponseError, match=r"block 0 \(text\)"):
        await ask(model, conversation(0))


async def test_replies_are_copies_of_the_script() -> None:
    blocks: list[ContentBlock] = [tool_use("toolu_1", "search", {"q": "a"})]
    model = ScriptedModel([blocks])
    params = model.params
    reply = await ask(model, conversation(0))
    reply[0]["input"]["q"] = "mutated"
    reply.append(text("extra"))
    tool_uses(blocks)[0]["input"]["q"] = "changed"
    blocks.clear()  # changing the caller's list after construction changes nothing
    assert await ask(model, conversation(0)) == [tool_use("toolu_1", "search", {"q": "a"})]
    assert model.params == params


def test_params_are_stable_and_describe_the_script() -> None:
    a = ScriptedModel(copy.deepcopy(SCRIPT))
    b = ScriptedModel(copy.deepcopy(SCRIPT))
    assert a.params == b.params
    assert json.loads(json.dumps(a.params)) == a.params
    assert a.params["responses"] == 2
    assert len(a.params["script_hash"]) == 64
    assert ScriptedModel([*SCRIPT, "more"]).params != a.params
    assert ScriptedModel(["It is a library."]).params != ScriptedModel(["It is a lib."]).params
    # Key order inside a block does not matter: the hash is over canonical JSON.
    assert (
        ScriptedModel([[{"type": "text", "text": "x"}]]).params
        == ScriptedModel([[{"text": "x", "type": "text"}]]).params
    )
    assert a.name == "scripted"
    assert ScriptedModel(SCRIPT, name="planner").name == "planner"


def test_bad_scripts_are_refused() -> None:
    with pytest.raises(TypeError, match="not a string"):
        ScriptedModel("hello")
    with pytest.raises(TypeError):
        ScriptedModel([[{"type": "text", "text": {1, 2}}]])  # type: ignore[list-item]


async def test_default_usage_is_derived_from_sizes() -> None:
    model = ScriptedModel(["short", "short"])
    small = (await model(system=None, messages=conversation(0), tools=[])).usage
    again = (await ScriptedModel(["short"])(system=None, messages=conversation(0), tools=[])).usage
    assert small == again
    assert small.input_tokens >= 1
    assert small.output_tokens >= 1
    tools: list[ToolDefinition] = [
        {"name": "search", "description": "Search the web.", "input_schema": {}}
    ]
    bigger = (await model(system="x" * 400, messages=conversation(0), tools=tools)).usage
    assert bigger.input_tokens > small.input_tokens + 100
    assert bigger.output_tokens == small.output_tokens


async def test_usage_can_be_fixed_or_computed() -> None:
    fixed = ScriptedModel(["a"], usage=Usage(input_tokens=10, output_tokens=2))
    assert (await fixed(system=None, messages=conversation(0), tools=[])).usage == Usage(
        input_tokens=10, output_tokens=2
    )

    def per_call(messages: list[Message], blocks: list[ContentBlock]) -> Usage:
        return Usage(input_tokens=len(messages), output_tokens=len(blocks))

    computed = ScriptedModel(SCRIPT, usage=per_call)
    reply = await computed(system=None, messages=conversation(1), tools=[])
    assert reply.usage == Usage(input_tokens=3, output_tokens=1)


async def test_call_can_be_cancelled() -> None:
    model = ScriptedModel(["never"])
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ask(model, conversation(0))
    assert scope.cancelled_caught
    assert model.calls == 0


def test_block_helpers() -> None:
    arguments = {"q": ["a"]}
    block = tool_use("toolu_1", "search", arguments)
    arguments["q"].append("b")
    assert block == {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": ["a"]}}
    assert tool_use("toolu_2", "now")["input"] == {}
    assert text("hi") == {"type": "text", "text": "hi"}
