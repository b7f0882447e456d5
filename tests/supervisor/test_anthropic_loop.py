"""A whole run through the Supervisor on ``AnthropicModel``, offline.

The real SDK client is used; only its HTTP transport is replaced by canned responses.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import anyio
import httpx2

import tether
from tether.journal import ModelResponse, RunStarted
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, of_type, read_events, results_by_id

MODEL = "claude-haiku-4-5"
RUN = "run-1"


def message(content: list[dict[str, Any]], *, stop_reason: str, usage: dict[str, int]) -> Any:
    return {
        "id": "msg_01XYZ",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


TOOL_USE = message(
    [
        {"type": "text", "text": "Let me check.", "citations": None},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    stop_reason="tool_use",
    usage={"input_tokens": 30, "output_tokens": 12},
)
FINAL = message(
    [{"type": "text", "text": "It is 18 degrees in Paris."}],
    stop_reason="end_turn",
    usage={"input_tokens": 55, "output_tokens": 9},
)


class FakeAPI:
    """Answers from a queue and keeps every request body it was sent."""

    def __init__(self, *bodies: dict[str, Any]) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.bodies.pop(0))


@asynccontextmanager
async def anthropic_model(api: FakeAPI) -> AsyncIterator[tether.AnthropicModel]:
    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(api)) as http,
        anthropic.AsyncAnthropic(api_key="test-key", http_client=http, max_retries=0) as client,
    ):
        yield tether.AnthropicModel(MODEL, client=client, max_tokens=256)


def weather_tools(cities: list[str], *, hang: bool = False) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def get_weather(city: str) -> dict[str, Any]:
        """Current weather for a city."""
        cities.append(city)
        if hang:
            await anyio.sleep_forever()
        return {"city": city, "celsius": 18}

    return tools


async def test_a_run_on_the_anthropic_model(tmp_path: pathlib.Path) -> None:
    api = FakeAPI(TOOL_USE, FINAL)
    cities: list[str] = []
    tools = weather_tools(cities)
    async with (
        anthropic_model(api) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup,
    ):
        await sup.start(RUN, "Weather in Paris?", system="You are terse.")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert cities == ["Paris"]
    assert view.final_text == "It is 18 degrees in Paris."
    assert (view.input_tokens, view.output_tokens) == (85, 21)
    assert len(api.requests) == 2

    first, second = api.requests
    assert first["model"] == MODEL
    assert first["max_tokens"] == 256
    assert first["system"] == "You are terse."
    assert first["tools"] == tools.definitions()
    assert first["messages"] == [{"role": "user", "content": "Weather in Paris?"}]

    assert second["messages"][:2] == [
        first["messages"][0],
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
    ]
    assert second["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": '{"city":"Paris","celsius":18}',
                "is_error": False,
            }
        ],
    }
    assert results_by_id(view.messages)["toolu_01A"]["is_error"] is False

    events = await read_events(tmp_path, RUN)
    (started,) = of_type(events, RunStarted)
    assert started.manifest.model == MODEL
    assert started.manifest.model_params == {"max_tokens": 256}
    assert [r.usage.input_tokens for r in of_type(events, ModelResponse)] == [30, 55]


async def test_a_resumed_run_does_not_ask_the_api_again(tmp_path: pathlib.Path) -> None:
    cities: list[str] = []
    api = FakeAPI(TOOL_USE)
    async with (
        anthropic_model(api) as model,
        Supervisor(
            tether.FileStore(tmp_path),
            model=model,
            tools=weather_tools(cities, hang=True),
            drain_timeout=0,  # the call is cut off by the shutdown
        ) as sup,
    ):
        await sup.start(RUN, "Weather in Paris?")
        with anyio.fail_after(WAIT):
            while not cities:
                await anyio.sleep(0.01)
    assert len(api.requests) == 1

    api2 = FakeAPI(FINAL)
    async with (
        anthropic_model(api2) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=weather_tools(cities)) as sup,
    ):
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert cities == ["Paris", "Paris"]  # a "rerun" tool runs again after the interruption
    assert len(api2.requests) == 1
    assert api2.requests[0]["messages"][1]["content"][1]["id"] == "toolu_01A"
    assert api2.requests[0]["messages"][2]["content"][0]["tool_use_id"] == "toolu_01A"
    assert view.final_text == "It is 18 degrees in Paris."
    assert view.restarts == 0  # cut off by a shutdown: resumed, not restarted
