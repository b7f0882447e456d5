"""The agent the tracing tests run, in the test process and in a child that is killed.

It looks ticket K-1 up (``rerun``), sends a reply (``idempotency_key``: the help desk, a
JSON-lines file, sends one reply per key) and answers. Its model is a ``ScriptedModel`` that
also reports a response id (``msg_N`` for the N-th answer of the run) and prompt-cache usage,
as a real provider does, the same in every process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

import tether
from tether.journal import Usage
from tether.models import Message, ModelReply, ToolDefinition

RUN = "run-1"
USAGE = Usage(
    input_tokens=10, output_tokens=5, cache_read_input_tokens=100, cache_creation_input_tokens=20
)
use = tether.ScriptedModel.tool_use


class ProviderLikeModel:
    """A scripted model whose answers carry a response id and cache usage."""

    def __init__(self) -> None:
        self.inner = tether.ScriptedModel(
            [
                [use("toolu_1", "lookup", {"ticket": "K-1"})],
                [use("toolu_2", "send_reply", {"ticket": "K-1", "text": "Fixed."})],
                "Replied to K-1.",
            ]
        )

    @property
    def name(self) -> str:
        return "scripted-claude"

    @property
    def params(self) -> dict[str, Any]:
        return self.inner.params

    async def __call__(
        self, *, system: Any, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        reply = await self.inner(system=system, messages=messages, tools=tools)
        turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
        return msgspec.structs.replace(reply, usage=USAGE, response_id=f"msg_{turn}")


def replies(desk: Path) -> list[dict[str, Any]]:
    if not desk.exists():
        return []
    return [json.loads(line) for line in desk.read_text().splitlines() if line]


def app(desk: Path) -> tuple[ProviderLikeModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(ticket: str) -> str:
        """Look a ticket up."""
        return f"{ticket}: locked out after SSO"

    @tools.tool(policy="idempotency_key")
    async def send_reply(ticket: str, text: str, ctx: tether.ToolContext) -> str:
        """Reply to the customer; the help desk sends one reply per key."""
        if all(r["key"] != ctx.idempotency_key for r in replies(desk)):
            with desk.open("a") as f:
                f.write(json.dumps({"ticket": ticket, "key": ctx.idempotency_key}) + "\n")
        return "sent"

    return ProviderLikeModel(), tools
