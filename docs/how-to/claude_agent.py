"""A support agent on Claude with thinking, a server tool, prompt caching and streaming.

``ANTHROPIC_API_KEY=... python claude_agent.py RUN_ID``
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

import tether
from tether.models import TextBlock

# A list of text blocks, so the long part can carry a cache breakpoint.
SYSTEM: list[TextBlock] = [
    {"type": "text", "text": "You are Kitebase support. Be brief."},
    {
        "type": "text",
        "text": "Kitebase's support handbook: ... (long, the same for every run)",
        "cache_control": {"type": "ephemeral"},
    },
]

model = tether.AnthropicModel(
    "claude-sonnet-4-6",
    max_tokens=16000,
    thinking={"type": "enabled", "budget_tokens": 8000},  # extended thinking
    server_tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
)

tools = tether.ToolRegistry()


@tools.tool(policy="rerun", cache_control={"type": "ephemeral"})  # cache the tools too
async def get_ticket(ticket_id: str) -> dict[str, Any]:
    """Look a ticket up in the help desk."""
    return {"id": ticket_id, "title": "Customer locked out after SSO change"}


def show_text(run_id: str, text: str) -> None:
    """Text as it streams in (not durable: the answer is journaled whole when it ends)."""
    print(text, end="", flush=True)


async def main(run_id: str) -> None:
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=model, tools=tools, on_text=show_text) as sup:
        await sup.start(
            run_id, "Ticket KITE-142 just came in: what should we tell them?", system=SYSTEM
        )
        print("\n", await sup.wait(run_id))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
