"""``OpenAIModel`` offline, through the real ``openai`` SDK against the strict fakes of both APIs.

Every request goes through the SDK (serialisation, error classes, response and stream parsing)
and is validated by the fake as the real API would (``_chat_api``, ``_responses_api``); only
the network is replaced.
"""

from __future__ import annotations

import json
import pathlib
import pickle
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal

import anyio
import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import ModelError, ModelResponseError, OpenAIModel
from tether.journal import Usage
from tether.models import (
    Base64Source,
    ContentBlock,
    Message,
    OpaqueBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    _openai_chat,
    _openai_responses,
    text_sink,
    tool_uses,
)
from tether.models._openai_chat import EventData
from tether.models._openai_translate import Malformed

from .._plain import plain
from . import _chat_api as chat
from . import _responses_api as responses
from ._openai_fake import FakeAPI, api_error

MODEL = "gpt-5-mini"
WEATHER: ToolDefinition = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK: list[Message] = [{"role": "user", "content": "Weather in Paris?"}]


@asynccontextmanager
async def model_on(api: FakeAPI[Any], **options: Any) -> AsyncIterator[OpenAIModel]:
    kind: Literal["chat", "responses"] = "chat" if isinstance(api, chat.ChatAPI) else "responses"
    async with api.client() as client:
        yield OpenAIModel(MODEL, client=client, api=kind, **options)


def results(*pairs: tuple[str, str], error: bool = False) -> Message:
    blocks: list[ContentBlock] = [
        {"type": "tool_result", "tool_use_id": i, "content": c, "is_error": error} for i, c in pairs
    ]
    return {"role": "user", "content": blocks}


# -- Chat Completions -------------------------------------------------------------------------


async def test_chat_text_and_a_tool_call_become_blocks_and_go_back_as_sent() -> None:
    api = chat.ChatAPI(
        chat.answer("Checking.", chat.call("call_abc", "get_weather", {"city": "Paris"})),
        chat.answer("18 degrees."),
    )
    async with model_on(api, temperature=0.2, max_completion_tokens=300) as model:
        first = await model(system="You are terse.", messages=ASK, tools=[WEATHER])
        history = [*ASK, first.as_message(), results(("call_abc", "18C"))]
        second = await model(system="You are terse.", messages=history, tools=[WEATHER])
    api.assert_all_answered()
    assert first.content == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_abc", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert first.stop_reason == "tool_use"
    assert first.stop_details == {"finish_reason": "tool_calls"}
    assert second.content == [{"type": "text", "text": "18 degrees."}]
    assert second.stop_reason == "end_turn"
    sent = api.bodies[1]
    assert sent["model"] == MODEL
    assert (sent["temperature"], sent["max_completion_tokens"]) == (0.2, 300)
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "18C"},
    ]
    assert "stream" not in sent
    assert api.exchanges[0].headers["authorization"] == "Bearer test-key"


async def test_chat_parallel_calls_and_their_results_in_order() -> None:
    api = chat.ChatAPI(
        chat.answer(
            chat.call("call_1", "get_weather", {"city": "Paris"}),
            chat.call("call_2", "get_weather", {"city": "Oslo"}),
        ),
        chat.answer("Both mild."),
    )
    async with model_on(api) as model:
        first = await model(system=None, messages=ASK, tools=[WEATHER])
        history = [*ASK, first.as_message(), results(("call_1", "18C"), ("call_2", "9C"))]
        await model(system=None, messages=history, tools=[WEATHER])
    api.assert_all_answered()
    assert [b["id"] for b in plain(first.content)] == ["call_1", "call_2"]
    assert [(m["role"], m.get("tool_call_id")) for m in api.bodies[1]["messages"][1:]] == [
        ("assistant", None),
        ("tool", "call_1"),
        ("tool", "call_2"),
    ]
    assert "content" not in api.bodies[1]["messages"][1]  # no text: only the calls


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_calls_of_one_answer_sharing_an_id_are_told_apart(kind: str) -> None:
    """A compatible server that numbers calls badly: three calls, two named ``call_0`` and
    one already named what the renamed one would be."""
    ids = ["call_0", "call_0", "call_0-2"]
    cities = ["Paris", "Oslo", "Rome"]
    api: FakeAPI[Any]
    if kind == "chat":
        api = chat.ChatAPI(
            chat.answer(
                *(
                    chat.call(i, "get_weather", {"city": c})
                    for i, c in zip(ids, cities, strict=True)
                )
            ),
            chat.answer("All mild."),
        )
    else:
        api = responses.ResponsesAPI(
            responses.answer(
                *(
                    responses.function_call(i, "get_weather", {"city": c})
                    for i, c in zip(ids, cities, strict=True)
                )
            ),
            responses.answer("All mild."),
        )
    async with model_on(api) as model:
        first = await model(system=None, messages=ASK, tools=[WEATHER])
        renamed = [b["id"] for b in plain(first.content) if b["type"] == "tool_use"]
        assert renamed == ["call_0", "call_0-3", "call_0-2"]
        assert [b["input"]["city"] for b in plain(first.content)] == cities
        answers = results(*((i, f"{c}: mild") for i, c in zip(renamed, cities, strict=True)))
        await model(system=None, messages=[*ASK, first.as_message(), answers], tools=[WEATHER])
    api.assert_all_answered()
    assert api.rejections == []  # each call and its result paired by the new ids


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ('{"city": "Par', "they are not valid JSON (Unterminated string"),
        ('["Paris"]', "they are JSON but not an object (list): '[\"Paris\"]'"),
        ('{"city": "Paris"} trailing', "they are not valid JSON (Extra data"),
    ],
)
async def test_chat_arguments_that_are_not_an_object_are_marked_not_guessed(
    arguments: str, error: str
) -> None:
    api = chat.ChatAPI(
        chat.answer(chat.call("call_1", "get_weather", arguments)), chat.answer("ok")
    )
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[WEATHER])
        [block] = tool_uses(reply.content)
        assert block["input"] == {}
        assert block["input_error"].startswith(error)
        # It goes back as a call with no arguments; the error result says what was wrong.
        history = [*ASK, reply.as_message(), results(("call_1", "not run"), error=True)]
        await model(system=None, messages=history, tools=[WEATHER])
    sent = api.bodies[1]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "error: not run"}


async def test_chat_empty_arguments_are_no_arguments() -> None:
    api = chat.ChatAPI(chat.answer(chat.call("call_1", "get_weather", "")))
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[WEATHER])
    assert reply.content == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_a_call_cut_off_by_length_is_max_tokens(stream: bool) -> None:
    api = chat.ChatAPI(
        chat.answer(chat.call("call_1", "get_weather", '{"ci'), finish_reason="length")
    )
    async with model_on(api, stream=stream) as model:
        reply = await model(system=None, messages=ASK, tools=[WEATHER])
    assert reply.stop_reason == "max_tokens"
    assert reply.stop_details == {"finish_reason": "length"}
    assert "input_error" in reply.content[0]
    assert api.exchanges[0].stream is stream


@pytest.mark.parametrize(
    ("scripted", "blocks"),
    [
        (
            chat.answer(refusal="I can't help with that."),
            [{"type": "openai_refusal", "refusal": "I can't help with that."}],
        ),
        (chat.answer("I", finish_reason="content_filter"), [{"type": "text", "text": "I"}]),
    ],
)
async def test_chat_refusals_stop_as_refusal(
    scripted: chat.Answer, blocks: list[dict[str, Any]]
) -> None:
    api = chat.ChatAPI(scripted)
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    assert reply.stop_reason == "refusal"
    assert reply.content == blocks


async def test_chat_usage_keeps_cached_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1000},
        "completion_tokens_details": {"reasoning_tokens": 250},
    }
    api = chat.ChatAPI(chat.answer("Done.", usage=usage))
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    assert reply.usage == Usage(
        input_tokens=200, output_tokens=300, cache_read_input_tokens=1000, reasoning_tokens=250
    )
    assert reply.usage.total == 1500  # reasoning is part of the output, not counted twice


async def test_chat_reasoning_of_a_compatible_server_is_kept_not_sent_back() -> None:
    api = chat.ChatAPI(
        chat.answer("Paris: 18C.", reasoning="The user wants Paris."), chat.answer("Yes.")
    )
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
        history: list[Message] = [*ASK, reply.as_message(), {"role": "user", "content": "Sure?"}]
        await model(system=None, messages=history, tools=[])
    assert reply.content == [
        {"type": "openai_reasoning_content", "text": "The user wants Paris."},
        {"type": "text", "text": "Paris: 18C."},
    ]
    assert api.bodies[1]["messages"][1] == {"role": "assistant", "content": "Paris: 18C."}


async def test_chat_streams_to_the_sink_and_rebuilds_the_whole_answer() -> None:
    api = chat.ChatAPI(
        chat.answer(
            "Let me look that up for you.",
            chat.call("call_1", "get_weather", {"city": "Paris"}),
            chat.call("call_2", "get_weather", {"city": "Oslo"}),
            reasoning="Two cities.",
            usage={"prompt_tokens": 50, "completion_tokens": 20},
        )
    )
    pieces: list[str] = []
    token = text_sink.set(pieces.append)
    try:
        async with model_on(api) as model:
            reply = await model(system=None, messages=ASK, tools=[WEATHER])
    finally:
        text_sink.reset(token)
    assert api.exchanges[0].stream
    assert api.bodies[0]["stream_options"] == {"include_usage": True}
    assert len(pieces) > 1
    assert "".join(pieces) == "Let me look that up for you."
    assert [b["type"] for b in reply.content] == [
        "openai_reasoning_content",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert plain(reply.content)[3]["input"] == {"city": "Oslo"}
    assert reply.usage == Usage(input_tokens=50, output_tokens=20)


async def test_chat_a_stream_broken_off_is_transient() -> None:
    api = chat.ChatAPI(api_error(500, "server_error", "The server had an error", in_stream=True))
    async with model_on(api, stream=True) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.transient
    assert "The server had an error" in info.value.reason


# Event data: any text but line ends (U+2028 and its like included: JSON leaves them raw).
_LINES = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"))


@given(
    events=st.lists(st.lists(_LINES, min_size=1, max_size=3), max_size=6),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    noise=st.booleans(),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
)
def test_chat_stream_events_are_read_as_the_sse_rules_say(
    events: list[list[str]], newline: bytes, noise: bool, cuts: list[int]
) -> None:
    """Each event's data lines joined, whatever the line ends, with comments and other fields
    around them, however the bytes arrive; of a stream cut anywhere, the events it held whole."""
    wire = b""
    ends: list[int] = []  # where each event ends on the wire
    for lines in events:
        if noise:
            wire += b": keep-alive" + newline + b"event: chunk" + newline + b"id: 7" + newline
        wire += b"".join(b"data: " + line.encode() + newline for line in lines) + newline
        ends.append(len(wire))
    data = ["\n".join(lines) for lines in events]
    expected = [d for d in data if d]  # an event whose data is empty is no event
    splits = sorted({c % (len(wire) + 1) for c in cuts})
    pieces = [wire[i:j] for i, j in zip([0, *splits], [*splits, len(wire)], strict=True)]
    reader = EventData()
    assert [d for piece in pieces for d in reader.feed(piece)] == expected
    lf = len(newline) - 1  # with CR LF, the CR of the blank line ends the event already
    for cut in splits:
        whole = [d for d, at in zip(data, ends, strict=True) if at - lf <= cut and d]
        assert EventData().feed(wire[:cut]) == whole


async def test_chat_images_from_a_tool_result_follow_the_tool_messages() -> None:
    png: Base64Source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    result: ToolResultBlock = {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": [{"type": "text", "text": "the page"}, {"type": "image", "source": png}],
        "is_error": False,
    }
    call: ToolUseBlock = {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"city": "P"},
    }
    history: list[Message] = [
        *ASK,
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result, {"type": "text", "text": "What do you see?"}]},
    ]
    api = chat.ChatAPI(chat.answer("A page."))
    async with model_on(api) as model:
        await model(
            system=[{"type": "text", "text": "A."}, {"type": "text", "text": "B."}],
            messages=history,
            tools=[WEATHER],
        )
    api.assert_all_answered()
    sent = api.bodies[0]["messages"]
    assert sent[0] == {"role": "system", "content": "A.\n\nB."}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "the page"}
    assert sent[4]["role"] == "user"
    assert [p["type"] for p in sent[4]["content"]] == ["text", "image_url", "text"]
    assert sent[4]["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="


async def test_a_block_the_api_cannot_take_is_a_permanent_error_sent_nowhere() -> None:
    api = chat.ChatAPI()
    upload = OpaqueBlock({"type": "container_upload", "file_id": "f"})
    history: list[Message] = [{"role": "user", "content": [upload]}]
    async with model_on(api) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=history, tools=[])
    assert not info.value.transient
    assert "messages.0.content.0" in info.value.reason
    assert api.calls == 0


# -- Responses --------------------------------------------------------------------------------


async def test_responses_reasoning_and_calls_go_back_paired_and_sealed() -> None:
    api = responses.ResponsesAPI(
        responses.answer(
            responses.reasoning("Look Paris up."),
            responses.function_call("call_1", "get_weather", {"city": "Paris"}),
        ),
        responses.answer(responses.message("18 degrees.", phase="final_answer")),
    )
    params = {
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low"},
    }
    async with model_on(api, **params) as model:
        first = await model(system="You are terse.", messages=ASK, tools=[WEATHER])
        history = [*ASK, first.as_message(), results(("call_1", "18C"))]
        second = await model(system="You are terse.", messages=history, tools=[WEATHER])
    api.assert_all_answered()
    reasoning, call = plain(first.content)
    assert reasoning["type"] == "openai_reasoning"
    assert reasoning["item"]["encrypted_content"]
    assert call == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"city": "Paris"},
        "item_id": call["item_id"],
    }
    assert first.stop_reason == "tool_use"
    assert second.content == [
        {
            "type": "text",
            "text": "18 degrees.",
            "item_id": plain(second.content)[0]["item_id"],
            "phase": "final_answer",
        }
    ]
    sent = api.bodies[1]
    assert sent["instructions"] == "You are terse."
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": WEATHER["input_schema"],
            "strict": False,
        }
    ]
    assert [i.get("type") for i in sent["input"]] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent["input"][3] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "18C",
    }


async def test_responses_text_goes_back_as_its_output_message() -> None:
    api = responses.ResponsesAPI(
        responses.answer(responses.reasoning("Greet."), responses.message("Hello.", "Hi again.")),
        responses.answer("Bye."),
    )
    async with model_on(api) as model:
        first = await model(system=None, messages=ASK, tools=[])
        await model(
            system=None,
            messages=[*ASK, first.as_message(), {"role": "user", "content": "bye"}],
            tools=[],
        )
    api.assert_all_answered()
    sent = api.bodies[1]["input"]
    assert sent[2]["type"] == "message"
    assert sent[2]["id"] == plain(first.content)[1]["item_id"] == plain(first.content)[2]["item_id"]
    assert [p["text"] for p in sent[2]["content"]] == ["Hello.", "Hi again."]


async def test_responses_with_store_false_reasoning_comes_sealed_and_goes_back() -> None:
    """With ``store=False`` the model asks for the reasoning's encrypted content itself: the
    fake, as the API, refuses a reasoning item sent back that it can neither look up nor read."""
    api = responses.ResponsesAPI(
        responses.answer(responses.reasoning("Hm."), responses.message("One.")),
        responses.answer("Two."),
    )
    async with model_on(api, store=False) as model:
        assert model.params == {"api": "responses", "host": "api.openai.com", "store": False}
        first = await model(system=None, messages=ASK, tools=[])
        second = await model(
            system=None,
            messages=[*ASK, first.as_message(), {"role": "user", "content": "and?"}],
            tools=[],
        )
    api.assert_all_answered()
    assert [body["include"] for body in api.bodies] == [["reasoning.encrypted_content"]] * 2
    assert plain(first.content)[0]["item"]["encrypted_content"]
    assert (
        api.bodies[1]["input"][1]["encrypted_content"]
        == plain(first.content)[0]["item"]["encrypted_content"]
    )
    assert plain(second.content)[0]["text"] == "Two."


async def test_responses_an_include_of_ones_own_is_sent_as_given() -> None:
    """``include`` given is the user's word, also with ``store=False``: without the encrypted
    content the next request is refused, as the API refuses it."""
    api = responses.ResponsesAPI(
        responses.answer(responses.reasoning("Hm."), responses.message("One.")),
        responses.answer("Two."),
    )
    async with model_on(api, store=False, include=[]) as model:
        first = await model(system=None, messages=ASK, tools=[])
        with pytest.raises(ModelError) as info:
            await model(
                system=None,
                messages=[*ASK, first.as_message(), {"role": "user", "content": "and?"}],
                tools=[],
            )
    assert api.bodies[0]["include"] == []
    assert "HTTP 404" in info.value.reason
    assert "Items are not persisted when `store` is set to false" in info.value.reason
    assert not info.value.transient


@pytest.mark.parametrize(
    ("incomplete", "stop_reason"),
    [("max_output_tokens", "max_tokens"), ("content_filter", "refusal")],
)
async def test_responses_an_incomplete_response_says_why(incomplete: str, stop_reason: str) -> None:
    api = responses.ResponsesAPI(responses.answer("It was", incomplete=incomplete))
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    assert reply.stop_reason == stop_reason
    assert reply.stop_details == {"status": "incomplete", "incomplete_reason": incomplete}


async def test_responses_a_refusal_part() -> None:
    api = responses.ResponsesAPI(responses.answer(responses.message(responses.Refusal("No."))))
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    assert reply.stop_reason == "refusal"
    assert reply.content[0]["type"] == "openai_refusal"


async def test_responses_usage() -> None:
    usage = {
        "input_tokens": 900,
        "input_tokens_details": {"cached_tokens": 800},
        "output_tokens": 100,
        "output_tokens_details": {"reasoning_tokens": 64},
    }
    api = responses.ResponsesAPI(responses.answer("ok", usage=usage))
    async with model_on(api) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    assert reply.usage == Usage(
        input_tokens=100, output_tokens=100, cache_read_input_tokens=800, reasoning_tokens=64
    )


async def test_responses_streams_and_rebuilds_the_response() -> None:
    api = responses.ResponsesAPI(
        responses.answer(
            responses.reasoning("Check."),
            responses.message("Looking it up now."),
            responses.function_call("call_1", "get_weather", {"city": "Paris"}),
        )
    )
    pieces: list[str] = []
    token = text_sink.set(pieces.append)
    try:
        async with model_on(api) as model:
            reply = await model(system=None, messages=ASK, tools=[WEATHER])
    finally:
        text_sink.reset(token)
    assert api.exchanges[0].stream
    assert len(pieces) > 1
    assert "".join(pieces) == "Looking it up now."
    assert [b["type"] for b in reply.content] == ["openai_reasoning", "text", "tool_use"]
    assert plain(reply.content)[2]["input"] == {"city": "Paris"}


@pytest.mark.parametrize(("code", "transient"), [("server_error", True), ("invalid_prompt", False)])
@pytest.mark.parametrize("stream", [False, True])
async def test_responses_a_failed_response_is_classified_by_its_code(
    code: str, transient: bool, stream: bool
) -> None:
    api = responses.ResponsesAPI(responses.failed(code, "it went wrong"))
    async with model_on(api, stream=stream) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.transient is transient
    assert info.value.reason == f"the response failed: {code}: it went wrong"


async def test_responses_an_error_event_breaks_the_stream_off() -> None:
    api = responses.ResponsesAPI(
        api_error(500, "server_error", "try again", code="server_error", in_stream=True)
    )
    async with model_on(api, stream=True) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.transient
    assert info.value.reason == "the stream broke off: server_error: try again"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_the_answers_id_is_the_replys_response_id(kind: str, stream: bool) -> None:
    api: FakeAPI[Any] = (
        chat.ChatAPI(chat.answer("Hi."))
        if kind == "chat"
        else responses.ResponsesAPI(responses.answer("Hi."))
    )
    async with model_on(api, stream=stream) as model:
        reply = await model(system=None, messages=ASK, tools=[])
    if kind == "chat":
        assert reply.response_id == ("chatcmpl-fakestream" if stream else "chatcmpl-fake000001")
    else:
        assert reply.response_id is not None
        assert reply.response_id.startswith("resp_")


# -- errors, both APIs ------------------------------------------------------------------------


def both(*script: Any) -> list[Any]:
    return [chat.ChatAPI(*script), responses.ResponsesAPI(*script)]


@pytest.mark.parametrize(
    ("status", "error_type", "code", "transient"),
    [
        (400, "invalid_request_error", None, False),
        (401, "invalid_request_error", "invalid_api_key", False),
        (403, "invalid_request_error", "unsupported_country_region_territory", False),
        (404, "invalid_request_error", "model_not_found", False),
        (422, "invalid_request_error", None, False),
        (408, "timeout", None, True),
        (409, "conflict", None, True),
        (429, "requests", "rate_limit_exceeded", True),
        (429, "insufficient_quota", "insufficient_quota", False),  # waiting will not help
        (500, "server_error", None, True),
        (503, "server_error", None, True),
    ],
)
@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_errors_are_classified_as_transient_or_not(
    status: int, error_type: str, code: str | None, transient: bool, kind: str
) -> None:
    error = api_error(status, error_type, "nope", code=code, retry_after="3")
    api = chat.ChatAPI(error) if kind == "chat" else responses.ResponsesAPI(error)
    async with model_on(api) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert type(info.value) is ModelError
    assert info.value.transient is transient
    assert info.value.retry_after == (3.0 if transient else None)
    assert (
        info.value.reason == f"HTTP {status} {code or error_type}: nope (request-id req_fake000001)"
    )
    assert pickle.loads(pickle.dumps(info.value)).transient is transient
    assert isinstance(info.value.__cause__, openai.APIStatusError)


@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry_after": "7"}, 7.0), ({"retry_after_ms": "1500"}, 1.5), ({}, None)],
)
async def test_a_rate_limit_carries_the_wait_the_server_asked_for(
    headers: dict[str, Any], wait: float | None
) -> None:
    api = chat.ChatAPI(
        api_error(429, "requests", "Slow down", code="rate_limit_exceeded", **headers)
    )
    async with model_on(api) as model:
        with pytest.raises(ModelError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.retry_after == wait


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (httpx2.ConnectError("connection refused"), "connection failed"),
        (httpx2.ReadTimeout("timed out"), "request timed out"),
    ],
)
async def test_connection_failures_and_timeouts_are_transient(
    raised: Exception, reason: str
) -> None:
    def fail(request: httpx2.Request) -> httpx2.Response:
        raise raised

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(fail)) as http,
        openai.AsyncOpenAI(api_key="k", http_client=http, max_retries=0) as client,
    ):
        with pytest.raises(ModelError) as info:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert info.value.transient
    assert info.value.reason.startswith(reason)


async def test_a_connection_failure_names_the_server() -> None:
    def fail(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("All connection attempts failed")

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(fail)) as http,
        openai.AsyncOpenAI(
            api_key="k", base_url="http://127.0.0.1:18931/v1", http_client=http, max_retries=0
        ) as client,
    ):
        with pytest.raises(ModelError) as info:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert info.value.reason == (
        "connection failed: ConnectError: All connection attempts failed (server 127.0.0.1:18931)"
    )


@pytest.mark.parametrize(
    ("base_url", "said"),
    [
        (
            "http://127.0.0.1:8000",
            "; the server has nothing at http://127.0.0.1:8000/chat/completions (does the base "
            "URL lack its /v1?)",
        ),
        (
            "http://127.0.0.1:8000/v1",
            "; the server has nothing at http://127.0.0.1:8000/v1/chat/completions",
        ),
    ],
)
async def test_a_404_no_api_error_explains_names_the_url(base_url: str, said: str) -> None:
    """As vLLM (FastAPI) answers a path it does not serve."""
    not_found = httpx2.MockTransport(lambda r: httpx2.Response(404, json={"detail": "Not Found"}))
    async with (
        httpx2.AsyncClient(transport=not_found) as http,
        openai.AsyncOpenAI(
            api_key="k", base_url=base_url, http_client=http, max_retries=0
        ) as client,
    ):
        with pytest.raises(ModelError) as info:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert info.value.reason.startswith("HTTP 404: ")
    assert info.value.reason.endswith(said)
    assert not info.value.transient


async def test_an_unknown_param_is_refused_by_the_sdk_and_extra_body_goes_through() -> None:
    api = chat.ChatAPI(chat.answer("ok"))
    async with api.client() as client:
        with pytest.raises(ModelError, match="the SDK refused the request") as info:
            await OpenAIModel(MODEL, client=client, top_kk=3)(system=None, messages=ASK, tools=[])
        assert not info.value.transient
        assert api.calls == 0
        model = OpenAIModel(MODEL, client=client, extra_body={"seed": 7})
        await model(system=None, messages=ASK, tools=[])
    assert api.bodies[0]["seed"] == 7


async def test_cancellation_propagates_unchanged() -> None:
    async def hang(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(hang)) as http,
        openai.AsyncOpenAI(api_key="k", http_client=http, max_retries=0) as client,
    ):
        with anyio.move_on_after(0.05) as scope:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert scope.cancelled_caught


async def test_a_malformed_answer_is_a_response_error_with_its_usage() -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
    }
    async with (
        httpx2.AsyncClient(
            transport=httpx2.MockTransport(lambda r: httpx2.Response(200, json=body))
        ) as http,
        openai.AsyncOpenAI(api_key="k", http_client=http, max_retries=0) as client,
    ):
        with pytest.raises(ModelResponseError) as info:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert info.value.reason == "the answer has no choices"
    assert info.value.usage == Usage(input_tokens=5)


# -- answers of the wrong shape: malformed, naming the field ----------------------------------


@asynccontextmanager
async def serving(
    body: object, *, events: bytes | None = None
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An SDK client whose every request gets ``body`` as JSON, or ``events`` as a stream: what
    a server outside the strict fakes may send."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        if events is not None:
            return httpx2.Response(
                200, content=events, headers={"content-type": "text/event-stream"}
            )
        return httpx2.Response(200, json=body)

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as http,
        openai.AsyncOpenAI(api_key="k", http_client=http, max_retries=0) as client,
    ):
        yield client


def completion(**fields: Any) -> dict[str, Any]:
    """A Chat Completions answer ("Hi.") with ``fields`` in place of its own."""
    message = {"role": "assistant", "content": "Hi."}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    return body | fields


def with_message(**message: Any) -> dict[str, Any]:
    return completion(choices=[{"index": 0, "message": message, "finish_reason": "stop"}])


def chunks(*deltas: Any, usage: Any = None) -> bytes:
    """A Chat Completions stream: one chunk per delta, the finish reason, the usage, [DONE]."""
    out = [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
    out.append({"index": 0, "delta": {}, "finish_reason": "stop"})
    events = [{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [c]} for c in out]
    if usage is not None:
        events.append(
            {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return data + b"data: [DONE]\n\n"


def response(**fields: Any) -> dict[str, Any]:
    """A Responses API response ("Hi.") with ``fields`` in place of its own."""
    text = {"type": "output_text", "text": "Hi.", "annotations": []}
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": [text]}
    body = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": MODEL,
        "status": "completed",
        "output": [item],
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    }
    return body | fields


def completed(body: object) -> bytes:
    event = {"type": "response.completed", "sequence_number": 1, "response": body}
    return b"event: response.completed\ndata: " + json.dumps(event).encode() + b"\n\n"


_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_PIECE = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}


async def test_chat_shapes_some_servers_send_are_read_not_refused() -> None:
    """A call id as a number, counts as floats, and streamed arguments as an object (as a
    whole answer's are read): none of them is a malformed answer."""
    body = with_message(role="assistant", tool_calls=[_CALL | {"id": 7}])
    body["usage"] = {"prompt_tokens": 12.0, "completion_tokens": 3.0}
    async with serving(body) as client:
        reply = await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert reply.usage.input_tokens == 12
    [call] = tool_uses(reply.content)
    assert call["id"] == "7"
    streamed = chunks({"tool_calls": [_PIECE | {"function": {"name": "f", "arguments": {"a": 1}}}]})
    async with serving(None, events=streamed) as client:
        reply = await OpenAIModel(MODEL, client=client, stream=True)(
            system=None, messages=ASK, tools=[]
        )
    [call] = tool_uses(reply.content)
    assert call["input"] == {"a": 1}


@pytest.mark.parametrize(
    ("body", "events", "reason"),
    [
        (completion(usage="lots"), None, "usage must be an object, not a string ('lots')"),
        (
            completion(usage={"prompt_tokens": 5, "prompt_tokens_details": "x"}),
            None,
            "usage.prompt_tokens_details must be an object, not a string ('x')",
        ),
        (
            completion(usage={"prompt_tokens": "5"}),
            None,
            "usage.prompt_tokens must be an integer, not a string ('5')",
        ),
        (
            completion(choices=[{"index": 0, "message": "Hi.", "finish_reason": "stop"}]),
            None,
            "choices.0.message must be an object, not a string ('Hi.')",
        ),
        (
            completion(choices=[{"index": 0, "finish_reason": "stop"}]),
            None,
            "choices.0.message must be an object, not null or missing",
        ),
        (
            with_message(role="assistant", content=7),
            None,
            "choices.0.message.content must be a string or an array of content parts, not a "
            "number (7)",
        ),
        (
            with_message(role="assistant", content=["Hi."]),
            None,
            "choices.0.message.content.0 must be an object, not a string ('Hi.')",
        ),
        (
            with_message(role="assistant", refusal=["No."]),
            None,
            "choices.0.message.refusal must be a string, not an array (['No.'])",
        ),
        (
            with_message(role="assistant", tool_calls=["f"]),
            None,
            "choices.0.message.tool_calls.0 must be an object, not a string ('f')",
        ),
        (
            with_message(role="assistant", tool_calls=[_CALL | {"id": [7]}]),
            None,
            "choices.0.message.tool_calls.0.id must be a string, not an array ([7])",
        ),
        (
            completion(choices=[{"index": 0, "message": {"content": "Hi."}, "finish_reason": 1}]),
            None,
            "choices.0.finish_reason must be a string, not a number (1)",
        ),
        ([1, 2], None, "the answer must be an object, not an array ([1, 2])"),
        (
            None,
            chunks("Hi."),
            "streamed chunk 1: choices.0.delta must be an object, not a string ('Hi.')",
        ),
        (
            None,
            chunks({"tool_calls": ["f"]}),
            "streamed chunk 1: choices.0.delta.tool_calls.0 must be an object, not a string ('f')",
        ),
        (
            None,
            chunks({"tool_calls": [_PIECE | {"index": "abc"}]}),
            "streamed chunk 1: choices.0.delta.tool_calls.0.index must be an integer, not a "
            "string ('abc')",
        ),
        (
            None,
            chunks({"tool_calls": [_PIECE | {"function": {"name": "f", "arguments": []}}]}),
            "streamed chunk 1: choices.0.delta.tool_calls.0.function.arguments must be a string, "
            "not an array ([])",
        ),
        (
            None,
            chunks({"content": 7}),
            "streamed chunk 1: choices.0.delta.content must be a string, not a number (7)",
        ),
        (
            None,
            chunks(usage="lots"),
            "streamed chunk 2: usage must be an object, not a string ('lots')",
        ),
        (
            None,
            chunks(usage={"completion_tokens_details": "x"}),
            "usage.completion_tokens_details must be an object, not a string ('x')",
        ),
    ],
)
async def test_chat_a_field_of_the_wrong_type_is_a_malformed_answer_naming_it(
    body: object, events: bytes | None, reason: str
) -> None:
    async with serving(body, events=events) as client:
        model = OpenAIModel(MODEL, client=client, stream=events is not None)
        with pytest.raises(ModelResponseError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.reason == reason
    assert not info.value.transient


_FUNCTION_CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (response(usage="lots"), "usage must be an object, not a string ('lots')"),
        (
            response(usage={"input_tokens": 5, "output_tokens_details": []}),
            "usage.output_tokens_details must be an object, not an array ([])",
        ),
        (response(output="Hi."), "output must be an array, not a string ('Hi.')"),
        (response(output=["Hi."]), "output.0 must be an object, not a string ('Hi.')"),
        (
            response(output=[{"type": "message", "id": "msg_1", "content": "Hi."}]),
            "output.0.content must be an array, not a string ('Hi.')",
        ),
        (
            response(output=[{"type": "message", "id": "msg_1", "content": ["Hi."]}]),
            "output.0.content.0 must be an object, not a string ('Hi.')",
        ),
        (
            response(output=[{"type": "message", "content": [{"type": "output_text"}]}]),
            "output.0.content.0.text must be a string, not null or missing",
        ),
        (
            response(output=[{"type": "message", "content": [{"type": "refusal", "refusal": 1}]}]),
            "output.0.content.0.refusal must be a string, not a number (1)",
        ),
        (
            response(output=[_FUNCTION_CALL | {"name": 5}]),
            "output.0.name must be a string, not a number (5)",
        ),
        (
            response(output=[_FUNCTION_CALL | {"id": 5}]),
            "output.0.id must be a string, not a number (5)",
        ),
        (response(status=200), "status must be a string, not a number (200)"),
        (
            response(status="incomplete", incomplete_details="max_output_tokens"),
            "incomplete_details must be an object, not a string ('max_output_tokens')",
        ),
        (response(status="failed", error="boom"), "error must be an object, not a string ('boom')"),
        ("Hi.", "the response must be an object, not a string ('Hi.')"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_responses_a_field_of_the_wrong_type_is_a_malformed_answer_naming_it(
    body: object, reason: str, stream: bool
) -> None:
    if stream and not isinstance(body, dict):
        reason = reason.replace("the response", "the response.completed event's response")
    async with serving(body, events=completed(body) if stream else None) as client:
        model = OpenAIModel(MODEL, client=client, api="responses", stream=stream)
        with pytest.raises(ModelResponseError) as info:
            await model(system=None, messages=ASK, tools=[])
    assert info.value.reason == reason


async def test_a_malformed_answer_carries_the_usage_it_could_read() -> None:
    async with serving(with_message(role="assistant", content=7)) as client:
        with pytest.raises(ModelResponseError) as info:
            await OpenAIModel(MODEL, client=client)(system=None, messages=ASK, tools=[])
    assert info.value.usage == Usage(input_tokens=5, output_tokens=2)


# Any JSON, its keys and strings mostly the ones both APIs use, so the parsers meet every field
# of every type in every place.
_WORDS = st.sampled_from(
    [
        "usage", "choices", "message", "content", "delta", "tool_calls", "index", "function",
        "name", "arguments", "id", "refusal", "finish_reason", "prompt_tokens", "text",
        "prompt_tokens_details", "completion_tokens_details", "cached_tokens", "output",
        "type", "annotations", "call_id", "status", "incomplete_details", "reason", "phase",
        "input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details",
        "reasoning_tokens", "output_text", "function_call", "reasoning", "incomplete",
    ]
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _WORDS | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_WORDS, inner, max_size=6),
    max_leaves=30,
)


@given(answer=st.dictionaries(_WORDS, _JSON, max_size=6))
def test_any_answer_is_a_reply_or_a_malformed_one_never_a_crash(answer: dict[str, Any]) -> None:
    for read in (_openai_chat.reply, _openai_responses.reply):
        with suppress(ModelResponseError):
            read(MODEL, answer)
    streamed = _openai_chat.StreamedAnswer()
    for chunk in (answer, *(v for v in answer.values() if isinstance(v, dict))):
        with suppress(Malformed):
            streamed.add(chunk)
    with suppress(ModelResponseError):
        _openai_chat.reply(MODEL, streamed.completion())


# -- configuration ----------------------------------------------------------------------------


def test_name_and_pinned_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = OpenAIModel(MODEL, temperature=0, api_key="sk-secret")
    assert model.name == MODEL
    assert model.params == {"api": "chat", "host": "api.openai.com", "temperature": 0}
    assert "sk-secret" not in repr(model)
    local = OpenAIModel("llama3.1", base_url="http://localhost:11434/v1", api_key="ollama")
    assert local.params == {"api": "chat", "host": "localhost:11434"}
    assert OpenAIModel(MODEL, api="responses").params["api"] == "responses"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:pw@vllm.internal:8000/v1")
    assert OpenAIModel(MODEL).params["host"] == "vllm.internal:8000"
    model.params["temperature"] = 1
    assert model.params["temperature"] == 0


async def test_a_given_clients_host_is_pinned_and_the_client_left_open() -> None:
    api = chat.ChatAPI()
    async with api.client(base_url="http://127.0.0.1:8080/v1") as client:
        async with OpenAIModel(MODEL, client=client) as model:
            assert model.params["host"] == "127.0.0.1:8080"
        assert not client.is_closed()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="messages"):
        OpenAIModel(MODEL, messages=[])
    with pytest.raises(ValueError, match="previous_response_id"):
        OpenAIModel(MODEL, api="responses", previous_response_id="resp_1")
    with pytest.raises(ValueError, match="n"):
        OpenAIModel(MODEL, n=2)
    with pytest.raises(ValueError, match="api"):
        OpenAIModel(MODEL, api="completions")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model"):
        OpenAIModel("")
    with pytest.raises(TypeError, match="JSON-able"):
        OpenAIModel(MODEL, metadata=object())


async def test_own_client_is_built_lazily_without_retries_and_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with OpenAIModel(MODEL, base_url="http://localhost:11434/v1", api_key="ollama") as model:
        assert await model.check() is None
        client = await model._sdk.get()
        assert await model._sdk.get() is client
        assert client.max_retries == 0  # every retry is the runtime's, journaled
        assert str(client.base_url) == "http://localhost:11434/v1/"
        assert client.api_key == "ollama"
    assert client.is_closed()
    await model.aclose()
    with pytest.raises(ModelError, match="closed"):
        await model(system=None, messages=ASK, tools=[])


async def test_missing_credentials_are_said_by_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    async with OpenAIModel(MODEL) as model:
        expected = "no OpenAI credentials: set OPENAI_API_KEY or pass api_key= or client="
        assert await model.check() == expected
        with pytest.raises(ModelError, match="no OpenAI credentials") as info:
            await model(system=None, messages=ASK, tools=[])
    assert not info.value.transient
