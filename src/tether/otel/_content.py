"""Conversations as the GenAI semantic conventions' message attributes (content capture only).

``gen_ai.input.messages`` and ``gen_ai.output.messages`` hold JSON arrays of messages, each a
``role`` and its ``parts``; tether's messages are Messages-API shaped, so each block becomes a
part:

======================  =================================================================
block                   part
======================  =================================================================
``text``                ``{"type": "text", "content": TEXT}``
``tool_use``            ``{"type": "tool_call", "id", "name", "arguments"}``
``tool_result``         ``{"type": "tool_call_response", "id", "response"}``
``thinking``            ``{"type": "reasoning", "content": THINKING}``
anything else           ``{"type": BLOCK_TYPE}`` (images and documents are left out)
======================  =================================================================

Nothing here runs unless content capture is on: this is customer data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..models import ContentBlock, Message, SystemPrompt, is_known


def messages_json(messages: Sequence[Message]) -> str:
    """``messages`` as the JSON of ``gen_ai.input.messages``."""
    return _dumps([_message(m) for m in messages])


def output_json(message: Message, finish_reason: str | None) -> str:
    """An answer as the JSON of ``gen_ai.output.messages``."""
    out = _message(message)
    if finish_reason is not None:
        out["finish_reason"] = finish_reason
    return _dumps([out])


def system_json(system: SystemPrompt) -> str | None:
    """A system prompt as the JSON of ``gen_ai.system_instructions``, if there is one."""
    if system is None or system == "":
        return None
    if isinstance(system, str):
        return _dumps([{"type": "text", "content": system}])
    return _dumps([_part(b) for b in system if isinstance(b, dict)])


def value_json(value: Any) -> str:
    """A tool's arguments or result, as JSON text."""
    return value if isinstance(value, str) else _dumps(value)


def _message(message: Message) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        parts = [{"type": "text", "content": content}]
    elif isinstance(content, list):
        parts = [_part(b) for b in content if isinstance(b, dict)]
    else:
        parts = []
    return {"role": message.get("role", ""), "parts": parts}


def _part(block: ContentBlock) -> dict[str, Any]:
    if is_known(block):
        if block["type"] == "text":
            return {"type": "text", "content": block.get("text", "")}
        if block["type"] == "tool_use":
            return {
                "type": "tool_call",
                "id": block.get("id"),
                "name": block.get("name"),
                "arguments": block.get("input"),
            }
        if block["type"] == "tool_result":
            return {
                "type": "tool_call_response",
                "id": block.get("tool_use_id"),
                "response": block.get("content"),
            }
        if block["type"] == "thinking":
            return {"type": "reasoning", "content": block.get("thinking", "")}
    return {"type": str(block.get("type"))}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
