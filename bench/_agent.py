"""The agent every system runs: five scripted model answers, four tool calls, nine steps.

Answer ``i`` calls tool ``i`` for the first four answers, then the fifth is the final text.
Each tool answers at once with a small dict. The model may sleep before answering (the model
latency of a case). A system runs it with the model and tools of this module and records each
step durably before the next, in its own way.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

import tether
from tether import models
from tether.models import ContentBlock, Message, SystemPrompt, ToolDefinition, ToolUseBlock

MODEL_CALLS = 5
TOOL_CALLS = 4
STEPS = MODEL_CALLS + TOOL_CALLS
TOOL_NAMES = ("tool_a", "tool_b", "tool_c", "tool_d")


def script(messages: list[Message]) -> list[ContentBlock] | str:
    """Answer ``i``: a call of tool ``i`` for the first four answers, then the final text."""
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step < TOOL_CALLS:
        name = TOOL_NAMES[step]
        return [tether.ScriptedModel.tool_use(f"toolu_{step}", name, {"item": f"i{step}"})]
    return "all four tools answered"


def new_model() -> tether.ScriptedModel:
    """The scripted model, answering at once."""
    return tether.ScriptedModel(script, name="scripted-bench")


class SlowModel:
    """A ``tether.Model`` that sleeps ``latency`` seconds, then answers as ``new_model()``."""

    def __init__(self, latency: float) -> None:
        self._inner = new_model()
        self._latency = latency

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def params(self) -> dict[str, Any]:
        return {**self._inner.params, "latency_s": self._latency}

    @property
    def calls(self) -> int:
        return self._inner.calls

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> tether.ModelReply:
        if self._latency > 0:
            await anyio.sleep(self._latency)
        return await self._inner(system=system, messages=messages, tools=tools)


async def trivial_tool(item: str) -> dict[str, Any]:
    """What every tool does: answer at once with a small dict."""
    return {"item": item, "ok": True, "n": 1}


def tether_tools(*, approval_first: bool) -> tether.ToolRegistry:
    """The four tools for tether (safe to repeat); with ``approval_first`` the first one waits
    for a person's approval, which parks every run at its first call."""
    tools = tether.ToolRegistry()
    for i, name in enumerate(TOOL_NAMES):

        async def tool(item: str) -> dict[str, Any]:
            """Look something up."""
            return await trivial_tool(item)

        tool.__name__ = name
        tools.tool(name=name, policy="rerun", approval=approval_first and i == 0)(tool)
    return tools


def tool_uses(message: Message) -> list[ToolUseBlock]:
    """The ``tool_use`` blocks of an assistant message (for systems without a tool runner)."""
    return models.tool_uses(models.blocks_of(message))


def tool_result_message(results: list[tuple[str, Any]]) -> Message:
    """The user message answering ``(call_id, content)`` pairs with ``tool_result`` blocks."""
    blocks: list[ContentBlock] = [
        {"type": "tool_result", "tool_use_id": call_id, "content": json.dumps(content)}
        for call_id, content in results
    ]
    return {"role": "user", "content": blocks}
