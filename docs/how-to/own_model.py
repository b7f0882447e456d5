"""A model of your own: ``python own_model.py``.

A rule-based model stands in for a real one: it asks for the weather once, then answers with
what the tool said. Everything it reads and builds is typed, so a mistyped block type is a
type error before anything runs.
"""

from __future__ import annotations

import tempfile
from typing import Any

import anyio

import tether
from tether.models import (
    ContentBlock,
    SystemPrompt,
    ToolResultBlock,
    blocks_of,
    is_known,
)

tools = tether.ToolRegistry()


@tools.tool(policy="rerun")
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18C and clear in {city}"


class WeatherModel:
    """Asks for the weather of the city the user named, then reports it."""

    name = "weather-rules"

    @property
    def params(self) -> dict[str, Any]:
        return {"rules": 1}  # pinned with each run, compared when it resumes

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[tether.Message],
        tools: list[tether.ToolDefinition],
    ) -> tether.ModelReply:
        results = [b for b in blocks_of(messages[-1]) if is_known(b) and b["type"] == "tool_result"]
        if results:
            return tether.ModelReply(content=[{"type": "text", "text": _said(results[0])}])
        city = str(messages[0]["content"]).rsplit(" ", 1)[-1].rstrip("?")
        call: ContentBlock = {
            "type": "tool_use",
            "id": "toolu_1",
            "name": tools[0]["name"],
            "input": {"city": city},
        }
        return tether.ModelReply(content=[call], stop_reason="tool_use")


def _said(result: ToolResultBlock) -> str:
    content = result.get("content", "")
    return content if isinstance(content, str) else "(no text)"


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        store = tether.FileStore(root)
        async with tether.Supervisor(store, model=WeatherModel(), tools=tools) as sup:
            await sup.start("weather-1", "What is the weather in Oslo?")
            status = await sup.wait("weather-1")
            print(status, (await sup.inspect("weather-1")).final_text)


if __name__ == "__main__":
    anyio.run(main)
