"""``AnthropicModel`` against the real API; runs only when ``ANTHROPIC_API_KEY`` is set.

``TETHER_LIVE_MODEL`` picks the model (default: a current small Claude model).
"""

from __future__ import annotations

import os

import pytest

from tether.models import AnthropicModel, Message, ToolDefinition, tool_uses

from .._plain import plain

pytestmark = pytest.mark.skipif(
    not os.environ.get("ANTHROPIC_API_KEY"),
    reason="live API test: set ANTHROPIC_API_KEY (and optionally TETHER_LIVE_MODEL) to run it",
)

LIVE_MODEL = os.environ.get("TETHER_LIVE_MODEL", "claude-haiku-4-5")


async def test_one_word_answer() -> None:
    async with AnthropicModel(LIVE_MODEL, max_tokens=16) as model:
        reply = await model(
            system="Answer with exactly one word and no punctuation.",
            messages=[{"role": "user", "content": "What colour is a clear daytime sky?"}],
            tools=[],
        )
    texts = [block["text"] for block in plain(reply.content) if block["type"] == "text"]
    assert texts
    assert "".join(texts).strip()
    assert reply.usage.input_tokens > 0
    assert reply.usage.output_tokens > 0
    assert reply.stop_reason in {"end_turn", "max_tokens"}


async def test_tool_round_trip_accepts_our_own_blocks() -> None:
    # The converted blocks must be accepted back by the API as the assistant turn.
    tools: list[ToolDefinition] = [
        {
            "name": "get_time",
            "description": "The current time in a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    messages: list[Message] = [{"role": "user", "content": "What time is it in Oslo?"}]
    async with AnthropicModel(
        LIVE_MODEL, max_tokens=200, tool_choice={"type": "tool", "name": "get_time"}
    ) as forced:
        first = await forced(system=None, messages=messages, tools=tools)
    calls = tool_uses(first.content)
    assert len(calls) == 1
    assert calls[0]["name"] == "get_time"
    messages.append(first.as_message())
    messages.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": calls[0]["id"],
                    "content": "14:05",
                    "is_error": False,
                }
            ],
        }
    )
    async with AnthropicModel(LIVE_MODEL, max_tokens=100) as model:
        second = await model(system="Be brief.", messages=messages, tools=tools)
    assert any(block["type"] == "text" for block in second.content)
