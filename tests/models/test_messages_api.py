"""The fake Messages API, through the real SDK client: what it answers and what it refuses."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import anthropic
import httpx2
import pytest

from ._messages_api import (
    Answer,
    MessagesAPI,
    ScriptError,
    answer,
    api_error,
    redacted_thinking,
    requires_streaming,
    server_tool_use,
    text,
    thinking,
    tool_use,
    truncated_tool_use,
    web_search_result,
)
from ._messages_rules import normalized

MODEL = "claude-haiku-4-5"
WEATHER: Any = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SEARCH: Any = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
ASK: Any = {"role": "user", "content": "Weather in Paris?"}
THINK: Any = {"type": "enabled", "budget_tokens": 1024}


def said(content: list[dict[str, Any]]) -> Any:
    return {"role": "assistant", "content": content}


def results(*pairs: tuple[str, str]) -> Any:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": c} for i, c in pairs],
    }


CALL: Any = tool_use("toolu_01A", "get_weather", {"city": "Paris"})
LOOP: Any = [ASK, said([text("Checking."), CALL]), results(("toolu_01A", "18C"))]


async def refused(api: MessagesAPI, **request: Any) -> str:
    """The message of the 400 the fake answers ``request`` with."""
    request = {"model": MODEL, "max_tokens": 256, **request}
    async with api.client() as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(**request)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert api.rejections[-1].message == body["error"]["message"]
    return str(body["error"]["message"])


async def test_a_plain_round_trip() -> None:
    api = MessagesAPI(answer("Sunny."))
    async with api.client() as client:
        reply = await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
    assert reply.content[0].type == "text"
    assert reply.content[0].text == "Sunny."
    assert (reply.stop_reason, reply.model, reply.role) == ("end_turn", MODEL, "assistant")
    assert reply._request_id is not None
    assert reply._request_id.startswith("req_")
    assert api.bodies == [{"model": MODEL, "max_tokens": 64, "messages": [ASK]}]
    [exchange] = api.exchanges
    assert exchange.headers["anthropic-version"]
    assert exchange.headers["authorization"] == "Bearer test-key"
    assert not exchange.stream
    assert api.calls == 1
    api.assert_all_answered()


async def test_a_tool_use_loop_with_the_results_paired() -> None:
    api = MessagesAPI(answer("Checking.", CALL), answer("18 degrees in Paris."))
    async with api.client() as client:
        first = await client.messages.create(
            model=MODEL, max_tokens=256, messages=[ASK], tools=[WEATHER]
        )
        assert first.stop_reason == "tool_use"
        history = [ASK, first.to_param(), results(("toolu_01A", "18C"))]
        final = await client.messages.create(
            model=MODEL, max_tokens=256, messages=history, tools=[WEATHER]
        )
    assert final.content[0].type == "text"
    assert final.content[0].text == "18 degrees in Paris."
    assert api.bodies[1]["messages"][1]["content"][1] == CALL
    api.assert_all_answered()


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        pytest.param(
            {"messages": [ASK, said([tool_use("toolu 1", "get_weather", {})])], "tools": [WEATHER]},
            "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
            id="bad-tool-use-id",
        ),
        pytest.param(
            {"messages": [*LOOP[:2], {"role": "user", "content": "and?"}], "tools": [WEATHER]},
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_01A. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
            id="missing-tool-result",
        ),
        pytest.param(
            {
                "messages": [*LOOP[:2], results(("toolu_01A", "a"), ("toolu_02B", "b"))],
                "tools": [WEATHER],
            },
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_02B. Each `tool_result` block must have a corresponding `tool_use` block in "
            "the previous message.",
            id="unexpected-tool-result",
        ),
        pytest.param(
            {"messages": [results(("toolu_01A", "a"))], "tools": [WEATHER]},
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_01A.",
            id="tool-result-with-nothing-before",
        ),
        pytest.param(
            {
                "messages": [*LOOP[:2], results(("toolu_01A", "a"), ("toolu_01A", "b"))],
                "tools": [WEATHER],
            },
            "messages.2.content.1: each `tool_use` must have a single result.",
            id="two-results-for-one-call",
        ),
        pytest.param(
            {
                "messages": [
                    *LOOP[:2],
                    {
                        "role": "user",
                        "content": [
                            text("Here:"),
                            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "a"},
                        ],
                    },
                ],
                "tools": [WEATHER],
            },
            "messages.2.content.1: `tool_result` blocks must come first",
            id="tool-result-after-text",
        ),
        pytest.param(
            {"messages": LOOP},
            "Requests which include `tool_use` or `tool_result` blocks must define tools.",
            id="history-without-tools",
        ),
        pytest.param(
            {"messages": [ASK, said([tool_use("toolu_1", "get_time", {})])], "tools": [WEATHER]},
            "messages.1.content.0.tool_use.name: tool 'get_time' is used in the conversation "
            "but is not defined in `tools`",
            id="undefined-tool-in-history",
        ),
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi", "lang": "en"}]}
                ]
            },
            "messages.0.content.0.text.lang: Extra inputs are not permitted",
            id="extra-key-in-a-block",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "picture"}]}]},
            "messages.0.content.0: Input tag 'picture' found using 'type' does not match any of "
            "the expected tags: 'text', 'image',",
            id="unknown-block-type",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "hi", "name": "ann"}]},
            "messages.0.name: Extra inputs are not permitted",
            id="extra-key-in-a-message",
        ),
        pytest.param(
            {"messages": [ASK], "extra_body": {"temperature": 0.5}},
            "temperature: Extra inputs are not permitted",
            id="extra-key-at-top-level",
        ),
        pytest.param(
            {
                "messages": [ASK],
                "tools": [
                    {**WEATHER, "input_schema": {**WEATHER["input_schema"], "type": "string"}}
                ],
            },
            "tools.0.custom.input_schema.type: Input should be 'object'",
            id="tool-schema-not-an-object",
        ),
        pytest.param(
            {"messages": [ASK], "tools": [{**WEATHER, "name": "get weather"}]},
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
            id="bad-tool-name",
        ),
        pytest.param(
            {"messages": [ASK], "tools": [WEATHER, WEATHER]},
            "tools: Tool names must be unique.",
            id="duplicate-tool-names",
        ),
        pytest.param(
            {"messages": [ASK], "tools": [{**SEARCH, "max_uses": "3"}]},
            "tools.0.web_search_20250305.max_uses: Input should be a valid integer",
            id="bad-server-tool",
        ),
        pytest.param(
            {"messages": [ASK], "system": [{"type": "image", "source": {}}]},
            "system.0.type: Input should be 'text'",
            id="system-list-with-a-non-text-block",
        ),
        pytest.param(
            {"messages": [ASK], "system": [{"type": "text", "text": ""}]},
            "system.0.text: text content blocks must be non-empty",
            id="empty-system-block",
        ),
        pytest.param(
            {"messages": [said([text("Hi")]), ASK]},
            'messages: first message must use the "user" role',
            id="assistant-first",
        ),
        pytest.param(
            {"messages": []}, "messages: at least one message is required", id="no-messages"
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": []}, said([text("Hi")])]},
            "messages.0: all messages must have non-empty content except for the optional "
            "final assistant message",
            id="empty-content",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "   "}]},
            "messages.0.content: text content blocks must contain non-whitespace text",
            id="whitespace-text",
        ),
        pytest.param(
            {"messages": [ASK, said([text("The answer is ")])]},
            "messages.1.content.0: final assistant content cannot end with trailing whitespace",
            id="prefill-ending-in-whitespace",
        ),
        pytest.param(
            {"messages": [ASK, said([CALL])], "tools": [WEATHER]},
            "messages.1: `tool_use` ids were found without `tool_result` blocks",
            id="final-assistant-tool-use",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [CALL]}], "tools": [WEATHER]},
            "messages.0.content.0: `tool_use` blocks may only appear in `assistant` messages",
            id="tool-use-from-the-user",
        ),
        pytest.param(
            {"messages": [{"role": "system", "content": "Be terse."}, ASK]},
            "messages.0.role: `system` messages inside `messages` are not modelled",
            id="system-message",
        ),
        pytest.param(
            {"messages": [ASK], "max_tokens": 0},
            "max_tokens: Input should be greater than or equal to 1",
            id="max-tokens-zero",
        ),
        pytest.param(
            {"messages": [ASK], "thinking": {"type": "enabled", "budget_tokens": 512}},
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
            id="small-thinking-budget",
        ),
        pytest.param(
            {"messages": [ASK], "max_tokens": 1024, "thinking": THINK},
            "max_tokens: `max_tokens` must be greater than `thinking.budget_tokens`",
            id="budget-not-below-max-tokens",
        ),
        pytest.param(
            {
                "messages": [ASK],
                "max_tokens": 2048,
                "thinking": THINK,
                "tools": [WEATHER],
                "tool_choice": {"type": "any"},
            },
            "Thinking may not be enabled when `tool_choice` forces tool use.",
            id="forced-tool-with-thinking",
        ),
        pytest.param(
            {"messages": [ASK], "tool_choice": {"type": "auto"}},
            "tool_choice: tool_choice may only be specified while providing tools.",
            id="tool-choice-without-tools",
        ),
        pytest.param(
            {
                "messages": [
                    ASK,
                    said([server_tool_use("srvtoolu_01", "web_search", {"query": "x"})]),
                    {"role": "user", "content": "go on"},
                ],
                "tools": [SEARCH],
            },
            "messages.1: `server_tool_use` ids were found without result blocks: srvtoolu_01.",
            id="server-tool-left-unanswered",
        ),
        pytest.param(
            {
                "messages": [
                    ASK,
                    said([server_tool_use("toolu_01", "web_search", {"query": "x"})]),
                ],
                "tools": [SEARCH],
            },
            "messages.1.content.0.server_tool_use.id: String should match pattern "
            "'^srvtoolu_[a-zA-Z0-9_]+$'",
            id="server-tool-use-id",
        ),
    ],
)
async def test_what_the_api_refuses_is_a_400_naming_the_path(
    request_: dict[str, Any], message: str
) -> None:
    api = MessagesAPI(answer("unused"))
    got = await refused(api, **request_)
    assert got.startswith(message), got
    assert api.pending == 1  # a refused request takes no answer
    assert api.exchanges == []


def cache(block: dict[str, Any], ttl: str | None = None) -> Any:
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl is not None:
        control["ttl"] = ttl
    return {**block, "cache_control": control}


async def test_at_most_four_cache_breakpoints() -> None:
    system = [cache(text("one")), cache(text("two"))]
    user: Any = {"role": "user", "content": [cache(text("three")), cache(text("four"))]}
    api = MessagesAPI(answer("ok"))
    async with api.client() as client:
        await client.messages.create(model=MODEL, max_tokens=64, system=system, messages=[user])
    message = await refused(api, system=system, messages=[user], tools=[cache(WEATHER)])
    assert message == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    message = await refused(
        api, messages=[user], cache_control={"type": "ephemeral"}, system=system
    )
    assert message.endswith("Found 5.")


async def test_a_one_hour_breakpoint_may_not_follow_a_five_minute_one() -> None:
    api = MessagesAPI(answer("ok"))
    message = await refused(
        api,
        system=[cache(text("rules"))],
        messages=[{"role": "user", "content": [cache(text("hi"), ttl="1h")]}],
    )
    assert message.startswith("messages.0.content.0.cache_control.ttl: a ttl='1h'")
    async with api.client() as client:
        await client.messages.create(
            model=MODEL,
            max_tokens=64,
            system=[cache(text("rules"), ttl="1h")],
            messages=[{"role": "user", "content": [cache(text("hi"))]}],
        )


async def thinking_loop(api: MessagesAPI) -> Any:
    """Ask once with thinking on; the history to send back after the tool ran."""
    async with api.client() as client:
        first = await client.messages.create(
            model=MODEL, max_tokens=2048, thinking=THINK, messages=[ASK], tools=[WEATHER]
        )
    sent = first.model_dump(mode="json", exclude_none=True)["content"]
    return [ASK, said(sent), results(("toolu_01A", "18C"))]


def thinking_api() -> MessagesAPI:
    return MessagesAPI(
        answer(thinking("The user wants Paris."), redacted_thinking("r1"), CALL),
        answer("18 degrees."),
    )


async def test_thinking_goes_back_unchanged_and_verifies() -> None:
    api = thinking_api()
    history = await thinking_loop(api)
    async with api.client() as client:
        reply = await client.messages.create(
            model=MODEL, max_tokens=2048, thinking=THINK, messages=history, tools=[WEATHER]
        )
    assert reply.content[0].type == "text"
    # A fresh fake (a resumed run in a new process) accepts the same history: same secret.
    later = MessagesAPI(answer("18 degrees."))
    async with later.client() as client:
        await client.messages.create(
            model=MODEL, max_tokens=2048, thinking=THINK, messages=history, tools=[WEATHER]
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            lambda c: c[0].update(signature=c[0]["signature"][:-4] + "AAA="),
            "messages.1.content.0: Invalid `signature` in `thinking` block",
            id="tampered-signature",
        ),
        pytest.param(
            lambda c: c[0].update(thinking="The user wants Lyon."),
            "messages.1.content.0: Invalid `signature` in `thinking` block",
            id="edited-thinking",
        ),
        pytest.param(
            lambda c: c[1].update(data=c[1]["data"][:10] + "x" + c[1]["data"][11:]),
            "messages.1.content.1: Invalid `data` in `redacted_thinking` block",
            id="altered-redacted-thinking",
        ),
        pytest.param(
            lambda c: c.__delitem__(slice(0, 2)),
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            "`tool_use`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block",
            id="thinking-dropped",
        ),
        pytest.param(
            lambda c: c.insert(0, c.pop(1)),
            "messages.1.content: `thinking` blocks must be passed back unmodified and in their "
            "original order",
            id="thinking-reordered",
        ),
        pytest.param(
            lambda c: c.extend([c.pop(0), c.pop(0)]),
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            "`tool_use`.",
            id="thinking-after-the-tool-use",
        ),
    ],
)
async def test_thinking_sent_back_changed_is_refused(change: Any, message: str) -> None:
    api = thinking_api()
    history = await thinking_loop(api)
    change(history[1]["content"])
    got = await refused(api, max_tokens=2048, thinking=THINK, messages=history, tools=[WEATHER])
    assert got.startswith(message), got


async def test_thinking_from_a_foreign_secret_is_refused() -> None:
    history = [ASK, said([thinking("x", secret=b"another key"), CALL]), LOOP[2]]
    message = await refused(MessagesAPI(), messages=history, tools=[WEATHER])
    assert message == "messages.1.content.0: Invalid `signature` in `thinking` block"


async def test_thinking_may_be_dropped_once_the_tool_loop_is_over() -> None:
    api = MessagesAPI(
        answer(thinking("The user wants Paris."), redacted_thinking("r1"), CALL),
        answer(thinking("Lyon now."), "Let me check Lyon."),
    )
    history = await thinking_loop(api)
    history[1]["content"] = history[1]["content"][2:]
    history += [said([text("18 degrees.")]), {"role": "user", "content": "And Lyon?"}]
    async with api.client() as client:
        await client.messages.create(
            model=MODEL, max_tokens=2048, thinking=THINK, messages=history, tools=[WEATHER]
        )
    api.assert_all_answered()


# -- streaming --------------------------------------------------------------------------------

CITATION = {
    "type": "char_location",
    "cited_text": "Paris is in France.",
    "document_index": 0,
    "document_title": None,
    "start_char_index": 0,
    "end_char_index": 19,
    "file_id": None,
}
RICH = answer(
    thinking("First, the city. Then the weather, with a longer thought to split."),
    redacted_thinking("r"),
    server_tool_use("srvtoolu_01", "web_search", {"query": "Paris weather"}),
    web_search_result("srvtoolu_01", [("https://example.com/paris", "Paris weather")]),
    text("Paris is in France, and it is 18 degrees there.", citations=[CITATION]),
    tool_use("toolu_01A", "get_weather", {"city": "Paris", "units": ["C", 1, 2.5, None, True]}),
    usage={
        "input_tokens": 12,
        "output_tokens": 345,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 5000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 0},
        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
        "service_tier": "standard",
    },
)


def dumped(message: anthropic.types.Message) -> dict[str, Any]:
    body = message.model_dump(mode="json", exclude_none=True)
    for block in body["content"]:
        block.pop("parsed_output", None)
    body.pop("id")
    return body


async def test_a_stream_rebuilds_exactly_the_answer() -> None:
    api = MessagesAPI(RICH, copy.deepcopy(RICH))
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2048,
        "messages": [ASK],
        "tools": [WEATHER, SEARCH],
    }
    async with api.client() as client:
        plain = await client.messages.create(**request)
        async with client.messages.stream(**request) as stream:
            seen = [event.type async for event in stream]
            streamed = await stream.get_final_message()
    assert dumped(streamed) == dumped(plain)
    assert dumped(plain)["content"] == normalized(RICH.content)
    assert streamed.usage.cache_read_input_tokens == 5000
    assert streamed.usage.server_tool_use is not None
    assert streamed.usage.server_tool_use.web_search_requests == 1
    assert seen.count("thinking") > 1  # the thought came in several deltas
    assert "signature" in seen
    assert "citation" in seen
    assert seen.count("input_json") > 1
    assert api.exchanges[1].stream
    assert api.bodies[1]["stream"] is True


async def test_the_raw_stream_is_in_the_apis_event_order() -> None:
    api = MessagesAPI(answer(text("Hi"), CALL))
    async with api.client() as client:
        raw = await client.messages.create(
            model=MODEL, max_tokens=64, messages=[ASK], tools=[WEATHER], stream=True
        )
        kinds = [event.type async for event in raw]
    assert kinds == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_stop"],
        # an empty input_json_delta, then '{"city": "Paris"}' in pieces of seven characters
        *["content_block_start", *["content_block_delta"] * 4, "content_block_stop"],
        "message_delta",
        "message_stop",
    ]


async def test_a_tool_use_cut_off_by_max_tokens() -> None:
    cut = answer(
        text("Let me check."), truncated_tool_use("toolu_01A", "get_weather", '{"city": "Par')
    )
    assert cut.stop_reason == "max_tokens"
    api = MessagesAPI(cut, cut)
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 20,
        "messages": [ASK],
        "tools": [WEATHER],
    }
    async with api.client() as client:
        plain = await client.messages.create(**request)
        async with client.messages.stream(**request) as stream:
            partial = "".join([e.partial_json async for e in stream if e.type == "input_json"])
            streamed = await stream.get_final_message()
    assert partial == '{"city": "Par'
    for message in (plain, streamed):
        assert message.stop_reason == "max_tokens"
        assert message.usage.output_tokens == 20
        block = message.content[1]
        assert isinstance(block, anthropic.types.ToolUseBlock)
        assert block.input == {}
    assert dumped(streamed) == dumped(plain)
    fuller = truncated_tool_use("toolu_01B", "get_weather", '{"city": "Paris", "da')
    assert fuller["input"] == {"city": "Paris"}


async def test_usage_with_cache_fields_round_trips() -> None:
    usage = {
        "input_tokens": 5,
        "output_tokens": 9,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
    }
    api = MessagesAPI(answer("Rain.", usage=usage), answer("Rain.", usage=usage))
    async with api.client() as client:
        plain = await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=[ASK]) as stream:
            streamed = await stream.get_final_message()
    for message in (plain, streamed):
        assert message.usage.model_dump(exclude_none=True) == usage


# -- errors -------------------------------------------------------------------------------------


async def test_scripted_errors_come_through_with_their_headers() -> None:
    api = MessagesAPI(
        api_error(429, "rate_limit_error", "Slow down", retry_after="7", request_id="req_011"),
        api_error(529, "overloaded_error", "Overloaded", retry_after_ms="1500"),
        api_error(401, "authentication_error", "invalid x-api-key"),
        api_error(400, "invalid_request_error", "prompt is too long"),
    )
    caught: list[anthropic.APIStatusError] = []
    async with api.client() as client:
        for expected in (
            anthropic.RateLimitError,
            anthropic.APIStatusError,
            anthropic.AuthenticationError,
            anthropic.BadRequestError,
        ):
            with pytest.raises(expected) as info:
                await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
            assert isinstance(info.value, anthropic.APIStatusError)
            caught.append(info.value)
    limited, overloaded, unauthorised, bad = caught
    assert limited.status_code == 429
    assert limited.response.headers["retry-after"] == "7"
    assert limited.request_id == "req_011"
    assert limited.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Slow down"},
        "request_id": "req_fake000001",
    }
    assert overloaded.status_code == 529
    assert overloaded.response.headers["retry-after-ms"] == "1500"
    assert unauthorised.status_code == 401
    assert bad.message.endswith("'message': 'prompt is too long'}, 'request_id': 'req_fake000004'}")
    assert len(api.exchanges) == 4
    api.assert_all_answered()


async def test_the_sdk_retries_after_the_wait_asked_for() -> None:
    api = MessagesAPI(
        api_error(529, "overloaded_error", "Overloaded", retry_after_ms="1"), answer("Sunny.")
    )
    async with api.client(max_retries=1) as client:
        reply = await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
    assert reply.content[0].type == "text"
    assert api.bodies[0] == api.bodies[1]
    assert api.exchanges[1].headers["x-stainless-retry-count"] == "1"


async def test_an_error_in_mid_stream() -> None:
    api = MessagesAPI(api_error(529, "overloaded_error", "Overloaded", in_stream=True))
    async with api.client() as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=[ASK]) as s:
                await s.get_final_message()
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_fake000001",
    }


async def test_other_endpoints_and_missing_credentials() -> None:
    api = MessagesAPI()
    async with api.client() as client:
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.count_tokens(model=MODEL, messages=[ASK])
    handler = MessagesAPI()
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as http:
        response = await http.post("https://api.anthropic.com/v1/messages", json={})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


# -- pause_turn ---------------------------------------------------------------------------------


async def test_a_paused_turn_is_sent_back_and_continued() -> None:
    search = server_tool_use("srvtoolu_01", "web_search", {"query": "Paris weather"})
    api = MessagesAPI(
        answer(text("Searching."), search, stop_reason="pause_turn"),
        answer(web_search_result("srvtoolu_01", [("https://example.com", "Paris")]), "18C."),
    )
    async with api.client() as client:
        paused = await client.messages.create(
            model=MODEL, max_tokens=256, messages=[ASK], tools=[SEARCH]
        )
        assert paused.stop_reason == "pause_turn"
        await client.messages.create(
            model=MODEL, max_tokens=256, messages=[ASK, paused.to_param()], tools=[SEARCH]
        )
    assert [e.continues_pause for e in api.exchanges] == [False, True]
    api.assert_all_answered()


# -- the script itself --------------------------------------------------------------------------


async def test_with_thinking_enabled_an_answer_must_start_with_thinking() -> None:
    api = MessagesAPI(answer("No thought."))
    async with api.client() as client:
        with pytest.raises(anthropic.APIConnectionError):
            await client.messages.create(
                model=MODEL, max_tokens=2048, thinking=THINK, messages=[ASK]
            )
    with pytest.raises(ScriptError, match="starts with thinking"):
        api.assert_all_answered()


async def test_an_answer_the_model_could_not_give_is_a_script_error() -> None:
    api = MessagesAPI(answer(tool_use("toolu_1", "get_time", {})))
    async with api.client() as client:
        with pytest.raises(anthropic.APIConnectionError) as info:
            await client.messages.create(
                model=MODEL, max_tokens=64, messages=[ASK], tools=[WEATHER]
            )
    assert isinstance(info.value.__cause__, ScriptError)
    with pytest.raises(ScriptError, match="defines no client tool 'get_time'"):
        api.assert_all_answered()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: answer({"type": "tool_use", "name": "x", "input": {}}),
            "answer block 0: tool_use.id: Field required",
        ),
        (lambda: answer({"type": "image"}), "answer block 0: Input tag 'image'"),
        (lambda: answer("x", stop_reason=cast(Any, "finished")), "stop_reason 'finished'"),
        (lambda: answer(CALL, stop_reason="end_turn"), "stops with 'tool_use'"),
        (lambda: answer("x", stop_reason="tool_use"), "needs a tool_use block"),
        (lambda: answer("x", usage={"tokens": 3}), "usage.tokens"),
        (
            lambda: answer({"type": "thinking", "thinking": "x"}),
            "thinking.signature: Field required",
        ),
    ],
)
def test_a_malformed_answer_is_refused_when_scripted(build: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=message.replace("(", r"\(")):
        build()


async def test_an_unscripted_request_and_an_unused_answer_fail_the_test() -> None:
    api = MessagesAPI(answer("one"), answer("two"))
    async with api.client() as client:
        await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
    with pytest.raises(AssertionError, match="1 scripted answer"):
        api.assert_all_answered()
    empty = MessagesAPI()
    async with empty.client() as client:
        with pytest.raises(anthropic.APIConnectionError):
            await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
    with pytest.raises(ScriptError, match="no answer scripted"):
        empty.assert_all_answered()


async def test_answers_from_a_function_of_the_request() -> None:
    def respond(body: dict[str, Any]) -> Answer:
        return answer(f"{len(body['messages'])} message(s)")

    api = MessagesAPI(respond=respond)
    async with api.client() as client:
        reply = await client.messages.create(model=MODEL, max_tokens=64, messages=[ASK])
    assert reply.content[0].type == "text"
    assert reply.content[0].text == "1 message(s)"


# -- the SDK's own rule for long requests -------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "max_tokens"),
    [(MODEL, 21_333), (MODEL, 21_334), ("claude-opus-4-0", 8_192), ("claude-opus-4-0", 8_193)],
)
async def test_requires_streaming_matches_the_sdk(model: str, max_tokens: int) -> None:
    api = MessagesAPI(answer("ok"))
    async with api.client() as client:
        if requires_streaming(model, max_tokens):
            with pytest.raises(ValueError, match="Streaming is required"):
                await client.messages.create(model=model, max_tokens=max_tokens, messages=[ASK])
            assert api.calls == 0  # refused before anything was sent
        else:
            await client.messages.create(model=model, max_tokens=max_tokens, messages=[ASK])
            assert api.calls == 1


def test_a_block_helper_output_is_plain_json() -> None:
    block = truncated_tool_use("toolu_1", "get_weather", '{"city": "Paris"')
    assert json.loads(json.dumps(block)) == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }
    assert type(answer(block).content[0]) is dict
