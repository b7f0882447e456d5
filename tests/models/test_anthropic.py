"""``AnthropicModel`` offline, through the SDK's own client over a mock HTTP transport.

The installed SDK speaks ``httpx2``, so the mock transport comes from there. Every request goes
through the real SDK (serialisation, retries, error classes, response parsing); only the
network is replaced.
"""

from __future__ import annotations

import json
import pathlib
import pickle
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import anyio
import httpx2
import pytest

from tether._errors import ModelError, ModelResponseError
from tether.journal import Usage
from tether.models import AnthropicModel, Message, ToolDefinition

MODEL = "claude-haiku-4-5"
TOOLS: list[ToolDefinition] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
MESSAGES: list[Message] = [{"role": "user", "content": "Weather in Paris?"}]

Handler = (
    Callable[[httpx2.Request], httpx2.Response]
    | Callable[[httpx2.Request], Coroutine[None, None, httpx2.Response]]
)


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Messages API response body, shaped like ``anthropic.types.Message``."""
    return {
        "id": "msg_01XYZ",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 25, "output_tokens": 12},
    }


def api_error(status: int, error_type: str, text: str, **headers: str) -> httpx2.Response:
    body = {"type": "error", "error": {"type": error_type, "message": text}}
    return httpx2.Response(status, json=body, headers=headers)


class FakeAPI:
    """Answers requests from a queue and keeps every request body it was sent."""

    def __init__(self, *responses: httpx2.Response) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        self.headers.append(request.headers)
        return self.responses.pop(0)


@asynccontextmanager
async def sdk_client(
    handler: Handler, *, max_retries: int = 2
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as http,
        anthropic.AsyncAnthropic(
            api_key="test-key", http_client=http, max_retries=max_retries
        ) as client,
    ):
        yield client


async def test_tool_use_reply_becomes_plain_dicts() -> None:
    api = FakeAPI(
        httpx2.Response(
            200,
            json=message(
                [
                    {"type": "text", "text": "Let me check.", "citations": None},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
                stop_reason="tool_use",
            ),
        )
    )
    async with sdk_client(api) as client:
        model = AnthropicModel(
            MODEL, client=client, max_tokens=256, stop_sequences=["END"], metadata={"user_id": "u1"}
        )
        reply = await model(system="You are terse.", messages=MESSAGES, tools=TOOLS)

    assert reply.content == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert all(type(block) is dict for block in reply.content)
    assert reply.usage == Usage(input_tokens=25, output_tokens=12)
    assert reply.stop_reason == "tool_use"
    assert reply.response_id == "msg_01XYZ"  # journaled, and traced as gen_ai.response.id
    [sent] = api.requests
    assert sent == {
        "model": MODEL,
        "max_tokens": 256,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
        "system": "You are terse.",
        "messages": MESSAGES,
        "tools": TOOLS,
    }
    assert api.headers[0]["authorization"] == "Bearer test-key"


async def test_text_reply_and_omitted_system_and_tools() -> None:
    api = FakeAPI(httpx2.Response(200, json=message([{"type": "text", "text": "Sunny."}])))
    async with sdk_client(api) as client:
        model = AnthropicModel(MODEL, client=client)
        reply = await model(system=None, messages=MESSAGES, tools=[])
    assert reply.content == [{"type": "text", "text": "Sunny."}]
    assert reply.stop_reason == "end_turn"
    assert api.requests == [{"model": MODEL, "max_tokens": 1024, "messages": MESSAGES}]


async def test_thinking_blocks_pass_through_and_cache_tokens_count() -> None:
    usage = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "output_tokens": 9,
    }
    api = FakeAPI(
        httpx2.Response(
            200,
            json=message(
                [
                    {"type": "thinking", "thinking": "Paris is in France.", "signature": "c2ln"},
                    {"type": "text", "text": "Rain."},
                ],
                usage=usage,
            ),
        )
    )
    async with sdk_client(api) as client:
        reply = await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert reply.content[0] == {
        "type": "thinking",
        "thinking": "Paris is in France.",
        "signature": "c2ln",
    }
    # Cache writes and reads are kept apart, as the API bills them; budgets count them all.
    assert reply.usage == Usage(
        input_tokens=5,
        output_tokens=9,
        cache_creation_input_tokens=100,
        cache_read_input_tokens=1000,
    )
    assert reply.usage.total == 1114


async def test_overloaded_is_retried_by_the_sdk() -> None:
    api = FakeAPI(
        api_error(529, "overloaded_error", "Overloaded", **{"retry-after-ms": "1"}),
        httpx2.Response(200, json=message([{"type": "text", "text": "Sunny."}])),
    )
    async with sdk_client(api) as client:
        with anyio.fail_after(5):
            reply = await AnthropicModel(MODEL, client=client)(
                system=None, messages=MESSAGES, tools=TOOLS
            )
    assert reply.content == [{"type": "text", "text": "Sunny."}]
    assert len(api.requests) == 2
    assert api.requests[0] == api.requests[1]
    assert api.headers[1]["x-stainless-retry-count"] == "1"


async def test_overloaded_past_the_retries_is_a_model_error() -> None:
    api = FakeAPI(
        *[api_error(529, "overloaded_error", "Overloaded", **{"retry-after-ms": "1"})] * 3
    )
    async with sdk_client(api, max_retries=2) as client:
        with pytest.raises(ModelError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert len(api.requests) == 3
    assert info.value.reason == "HTTP 529 overloaded_error: Overloaded"
    assert info.value.transient
    assert info.value.retry_after == 0.001
    assert isinstance(info.value.__cause__, anthropic.APIStatusError)


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # long past: ask at once
        ({"retry-after": "86400"}, 600.0),  # capped at ten minutes
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
async def test_a_transient_error_carries_the_wait_the_server_asked_for(
    headers: dict[str, str], wait: float | None
) -> None:
    api = FakeAPI(api_error(429, "rate_limit_error", "Slow down", **headers))
    async with sdk_client(api, max_retries=0) as client:
        with pytest.raises(ModelError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert info.value.transient
    assert info.value.retry_after == wait


@pytest.mark.parametrize(
    ("status", "error_type", "transient"),
    [
        (400, "invalid_request_error", False),
        (401, "authentication_error", False),
        (403, "permission_error", False),
        (404, "not_found_error", False),
        (413, "request_too_large", False),
        (408, "timeout_error", True),
        (409, "conflict", True),
        (429, "rate_limit_error", True),
        (500, "api_error", True),
        (503, "api_error", True),
        (529, "overloaded_error", True),
    ],
)
async def test_errors_are_classified_as_transient_or_not(
    status: int, error_type: str, transient: bool
) -> None:
    api = FakeAPI(api_error(status, error_type, "nope", **{"retry-after": "3"}))
    async with sdk_client(api, max_retries=0) as client:
        with pytest.raises(ModelError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert info.value.transient is transient
    assert info.value.retry_after == (3.0 if transient else None)
    assert pickle.loads(pickle.dumps(info.value)).transient is transient


async def test_bad_request_is_a_model_error_without_retry() -> None:
    api = FakeAPI(
        api_error(
            400,
            "invalid_request_error",
            "max_tokens: Field required",
            **{"request-id": "req_011ABC"},
        )
    )
    async with sdk_client(api) as client:
        with pytest.raises(ModelError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert type(info.value) is ModelError
    assert info.value.model == MODEL
    assert info.value.reason == (
        "HTTP 400 invalid_request_error: max_tokens: Field required (request-id req_011ABC)"
    )
    assert isinstance(info.value.__cause__, anthropic.BadRequestError)
    assert len(api.requests) == 1


async def test_connection_failure_is_a_model_error() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    async with sdk_client(refuse, max_retries=0) as client:
        with pytest.raises(ModelError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert info.value.reason.startswith("connection failed")
    assert "connection refused" in info.value.reason
    assert info.value.transient
    assert isinstance(info.value.__cause__, anthropic.APIConnectionError)


async def test_timeout_is_a_model_error() -> None:
    def stall(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    async with sdk_client(stall, max_retries=0) as client:
        with pytest.raises(ModelError, match="timed out") as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=[])
    assert info.value.transient
    assert isinstance(info.value.__cause__, anthropic.APITimeoutError)


async def test_malformed_response_is_a_response_error() -> None:
    api = FakeAPI(
        httpx2.Response(
            200,
            json=message(
                [
                    {"type": "text", "text": "Calling."},
                    {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}},
                ],
                stop_reason="tool_use",
            ),
        )
    )
    async with sdk_client(api) as client:
        with pytest.raises(ModelResponseError) as info:
            await AnthropicModel(MODEL, client=client)(system=None, messages=MESSAGES, tools=TOOLS)
    assert info.value.reason == "block 1 (tool_use): 'id' must be a string (missing)"
    assert len(api.requests) == 1


async def test_cancellation_propagates_unchanged() -> None:
    async def hang(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with sdk_client(hang) as client:
        model = AnthropicModel(MODEL, client=client)
        with anyio.move_on_after(0.05) as scope:
            await model(system=None, messages=MESSAGES, tools=[])
    assert scope.cancelled_caught


async def test_unknown_param_is_a_model_error_and_extra_body_reaches_the_api() -> None:
    # The installed SDK's messages.create has no ``temperature`` argument at all.
    api = FakeAPI(httpx2.Response(200, json=message([{"type": "text", "text": "Sunny."}])))
    async with sdk_client(api) as client:
        with pytest.raises(ModelError, match="temperature"):
            await AnthropicModel(MODEL, client=client, temperature=0.0)(
                system=None, messages=MESSAGES, tools=[]
            )
        assert api.requests == []
        model = AnthropicModel(MODEL, client=client, extra_body={"temperature": 0.0})
        assert model.params == {"max_tokens": 1024, "extra_body": {"temperature": 0.0}}
        await model(system=None, messages=MESSAGES, tools=[])
    assert api.requests[0]["temperature"] == 0.0


def test_name_and_params() -> None:
    model = AnthropicModel(MODEL, max_tokens=64, stop_sequences=["END"])
    assert model.name == MODEL
    assert model.params == {"max_tokens": 64, "stop_sequences": ["END"]}
    model.params["stop_sequences"].append("STOP")
    assert model.params["stop_sequences"] == ["END"]
    assert AnthropicModel(MODEL).params == {"max_tokens": 1024}


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="tools"):
        AnthropicModel(MODEL, tools=[])
    with pytest.raises(ValueError, match="server_tools"):
        AnthropicModel(MODEL, server_tools=[{"name": "web_search"}])
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicModel(MODEL, max_tokens=0)
    with pytest.raises(ValueError, match="model"):
        AnthropicModel("")
    with pytest.raises(TypeError, match="JSON-able"):
        AnthropicModel(MODEL, metadata=object())


async def test_own_client_is_built_lazily_and_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    async with AnthropicModel(MODEL) as model:
        assert await model.check() is None
        client = await model._sdk.get()
        assert await model._sdk.get() is client
        assert not client.is_closed()
        assert client.max_retries == 0  # every retry is the runtime's, journaled
    assert client.is_closed()
    await model.aclose()  # a second close does nothing
    with pytest.raises(ModelError, match="closed"):
        await model(system=None, messages=MESSAGES, tools=[])


async def test_a_given_client_is_left_open() -> None:
    api = FakeAPI()
    async with sdk_client(api) as client:
        async with AnthropicModel(MODEL, client=client):
            pass
        assert not client.is_closed()


async def test_missing_credentials_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_FEDERATION_RULE_ID",
        "ANTHROPIC_ORGANIZATION_ID",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    async with AnthropicModel(MODEL) as model:
        assert await model.check() == (
            "no Anthropic credentials: set ANTHROPIC_API_KEY or pass client="
        )
        with pytest.raises(ModelError, match="no Anthropic credentials") as info:
            await model(system=None, messages=MESSAGES, tools=[])
    assert not info.value.transient
