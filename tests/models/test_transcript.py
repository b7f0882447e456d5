"""What ``ScriptedModel`` keeps of a conversation: each message looked at once, read-only copies
that no call can change, and sizes that add up to what sizing the whole request gives."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.models import (
    ContentBlock,
    Message,
    ScriptedModel,
    ToolDefinition,
    ToolResultBlock,
    _transcript,
)
from tether.models._transcript import (
    FrozenDict,
    FrozenList,
    Transcripts,
    freeze,
    freeze_conversation,
    json_size,
    request_size,
)

tool_use = ScriptedModel.tool_use

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
messages_lists = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": json_values}),
    max_size=8,
)


@given(messages_lists, json_values, st.lists(json_values, max_size=3))
def test_sizes_add_up_to_the_whole_request(
    messages: list[Message], system: Any, tools: list[Any]
) -> None:
    transcript = Transcripts().of(messages)
    whole = json_size({"system": system, "messages": messages, "tools": tools})
    assert request_size(transcript.size, len(messages), system, json_size(tools)) == whole
    assistants = sum(1 for m in messages if m["role"] == "assistant")
    assert transcript.assistants == assistants


def _containers(value: Any) -> list[Any]:
    """Every dict and list within ``value``, itself included."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


@given(json_values)
def test_a_frozen_copy_equals_the_value_and_thaws_to_plain_containers(value: Any) -> None:
    frozen = freeze(value)
    assert frozen == value
    assert all(type(c) in (FrozenDict, FrozenList) for c in _containers(frozen))
    assert not {id(c) for c in _containers(frozen)} & {id(c) for c in _containers(value)}
    assert json.dumps(frozen) == json.dumps(value)
    plain = copy.deepcopy(frozen)
    assert plain == value
    assert not isinstance(plain, FrozenDict | FrozenList)
    assert pickle.loads(pickle.dumps(frozen)) == value


def test_a_frozen_copy_refuses_every_change() -> None:
    frozen = freeze({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    changes = [
        lambda: frozen.__setitem__("role", "assistant"),
        lambda: frozen.pop("role"),
        lambda: frozen.update(role="x"),
        lambda: frozen.setdefault("new", 1),
        frozen.clear,
        lambda: frozen["content"].append({}),
        lambda: frozen["content"].__setitem__(0, {}),
        frozen["content"].clear,
        lambda: frozen["content"][0].__delitem__("text"),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only messages"):
            change()
    assert frozen == {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": "go"}]
    for i in range(turns):
        messages.append({"role": "assistant", "content": [tool_use(f"t{i}", "step", {"n": i})]})
        result: ToolResultBlock = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_a_growing_conversation_is_looked_at_once_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked: list[object] = []
    real = _transcript.json_size

    def counted(value: object) -> int:
        looked.append(value)
        return real(value)

    monkeypatch.setattr(_transcript, "json_size", counted)
    transcripts = Transcripts()
    messages = conversation(500)
    transcripts.of(messages)
    assert len(looked) == len(messages)
    looked.clear()
    grown: list[Message] = [*messages, {"role": "assistant", "content": "done"}]
    transcript = transcripts.of(grown)
    assert looked == [grown[-1]]  # only the new message, however long the conversation
    assert transcript.assistants == 501


def test_a_conversation_that_changed_is_looked_at_again_from_the_change() -> None:
    transcripts = Transcripts()
    messages = conversation(3)
    transcripts.of(messages)
    changed: list[Message] = [*messages[:2], {"role": "user", "content": "something else"}]
    transcript = transcripts.of(changed)
    assert transcript.frozen == changed
    whole = json_size({"system": None, "messages": changed, "tools": []})
    assert request_size(transcript.size, len(changed), None, json_size([])) == whole
    assert transcript.assistants == 1


def test_at_most_limit_conversations_are_kept() -> None:
    transcripts = Transcripts(limit=2)
    conversations = [conversation(1) for _ in range(5)]
    for messages in conversations:
        transcripts.of(messages)
    assert len(transcripts) == 2
    transcripts.forget(conversations[-1])
    assert len(transcripts) == 1


async def test_a_script_function_cannot_change_the_runs_messages() -> None:
    seen: list[list[Message]] = []

    def script(messages: list[Message]) -> str | list[ContentBlock]:
        seen.append(messages)
        with pytest.raises(TypeError):
            messages[0]["content"] = "changed"
        plain = copy.deepcopy(messages)
        plain[0]["content"] = "a copy may change"
        messages.append({"role": "user", "content": "its own list is its own"})
        return [tool_use("t9", "step", {})] if len(seen) == 1 else "done"

    model = ScriptedModel(script)
    messages = conversation(0)
    before = copy.deepcopy(messages)
    await model(system=None, messages=list(messages), tools=[])
    messages += conversation(1)[1:]
    reply = await model(system=None, messages=list(messages), tools=[])
    assert reply.content == [{"type": "text", "text": "done"}]
    assert messages[:1] == before
    assert [len(s) for s in seen] == [2, 4]  # each call got a new list of the conversation


async def test_a_fresh_model_answers_and_sizes_a_conversation_alike() -> None:
    script: list[str | list[ContentBlock]] = [
        [tool_use(f"t{i}", "step", {"n": i})] for i in range(30)
    ]
    script.append("done")
    warm, fresh = ScriptedModel(script), ScriptedModel(script)
    messages = conversation(0)
    for turns in range(1, 31):
        messages = conversation(turns)
        a = await warm(system="be brief", messages=list(messages), tools=[])
        b = await fresh.__class__(script)(system="be brief", messages=list(messages), tools=[])
        assert a == b
        whole = json_size({"system": "be brief", "messages": messages, "tools": []})
        assert a.usage.input_tokens == max(1, whole // 4)


async def test_the_usage_estimate_sizes_the_tools_given_whether_new_or_the_last_ones() -> None:
    model = ScriptedModel(["a", "b", "c", "d", "e"])
    small: list[ToolDefinition] = [{"name": "t", "input_schema": {"type": "object"}}]
    large: list[ToolDefinition] = [{**small[0], "description": "x" * 400}]
    messages = conversation(0)

    async def estimate(tools: list[ToolDefinition]) -> int:
        reply = await model(system=None, messages=list(messages), tools=tools)
        messages.append(reply.as_message())
        messages.append({"role": "user", "content": "go on"})
        whole = json_size({"system": None, "messages": messages[:-2], "tools": tools})
        assert reply.usage.input_tokens == max(1, whole // 4)
        return reply.usage.input_tokens

    odd: Any = None  # outside the type, as a direct caller may pass: sized as it is
    reply = await model(system=None, messages=conversation(0), tools=odd)
    whole = json_size({"system": None, "messages": conversation(0), "tools": None})
    assert reply.usage.input_tokens == max(1, whole // 4)
    first = await estimate(list(small))
    assert await estimate(list(small)) > first  # the same definitions, in a new list: kept
    assert await estimate(list(large)) > first + 90  # other definitions: sized again
    assert await estimate([*small, *large]) > first + 90


@given(messages_lists, st.integers(min_value=0, max_value=8))
def test_freezing_a_conversation_freezes_what_is_not_yet_and_keeps_what_is(
    messages: list[Message], already: int
) -> None:
    original = copy.deepcopy(messages)
    already = min(already, len(messages))
    messages[:already] = [freeze(m) for m in messages[:already]]
    kept = messages[:already]
    freeze_conversation(messages)
    assert messages == original
    assert all(type(m) is FrozenDict for m in messages)
    assert all(a is b for a, b in zip(kept, messages, strict=False))  # not copied again
    again = list(messages)
    freeze_conversation(messages)
    assert all(a is b for a, b in zip(again, messages, strict=True))


def test_a_read_only_message_is_kept_as_it_is_and_a_plain_one_is_copied() -> None:
    messages = conversation(2)
    messages[:2] = [freeze(m) for m in messages[:2]]
    transcript = Transcripts().of(messages)
    assert transcript.frozen[0] is messages[0]
    assert transcript.frozen[1] is messages[1]
    assert all(type(m) is FrozenDict for m in transcript.frozen)
    assert all(c is not m for c, m in zip(transcript.frozen[2:], messages[2:], strict=True))
    assert transcript.frozen == messages
