"""``OpenAIModel`` against the real API; runs only when ``OPENAI_API_KEY`` is set.

``TETHER_LIVE_OPENAI_MODEL`` picks the model (default: a current small one); ``OPENAI_BASE_URL``
points the tests at a compatible server instead (the Responses test then needs it to speak
that API too).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import pytest

from tether.models import Message, OpenAIModel, ToolDefinition, tool_uses

from .._plain import plain

pytestmark = pytest.mark.skipif(
    not os.environ.get("OPENAI_API_KEY"),
    reason="live API test: set OPENAI_API_KEY (and optionally TETHER_LIVE_OPENAI_MODEL) to run it",
)

LIVE_MODEL = os.environ.get("TETHER_LIVE_OPENAI_MODEL", "gpt-5-mini")
TOOLS: list[ToolDefinition] = [
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


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_tool_round_trip_accepts_our_own_blocks(api: Literal["chat", "responses"]) -> None:
    # The translated answer must be accepted back by the API as the assistant turn, with the
    # tool's result paired to the call by the id that was journaled.
    messages: list[Message] = [{"role": "user", "content": "What time is it in Oslo?"}]
    choice: dict[str, Any] = (
        {"type": "function", "function": {"name": "get_time"}}
        if api == "chat"
        else {"type": "function", "name": "get_time"}
    )
    async with OpenAIModel(LIVE_MODEL, api=api, tool_choice=choice) as forced:
        first = await forced(system=None, messages=messages, tools=TOOLS)
    calls = tool_uses(first.content)
    assert len(calls) == 1
    assert calls[0]["name"] == "get_time"
    assert "input_error" not in calls[0]
    assert first.stop_reason == "tool_use"
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens > 0
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
    async with OpenAIModel(LIVE_MODEL, api=api, stream=True) as model:
        second = await model(system="Be brief.", messages=messages, tools=TOOLS)
    texts = [block["text"] for block in plain(second.content) if block["type"] == "text"]
    assert "".join(texts).strip()
    assert second.stop_reason == "end_turn"
    assert second.usage.output_tokens > 0
