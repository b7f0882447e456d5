"""A support agent whose runs survive ``kill -9``: ``python support.py [RUN_ID]``.

It starts the run if the store has none of that id; otherwise the supervisor resumes it where
it stopped. Either way it waits until the run finishes or waits for a person.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from helpdesk import Helpdesk

import tether


def make_tools(helpdesk: Helpdesk, *, approval: bool = False) -> tether.ToolRegistry:
    """The agent's tools; with ``approval``, a person approves each reply before it is sent."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")  # a read: safe to run again after a crash
    async def get_ticket(ticket_id: str) -> dict[str, Any]:
        """Look a ticket up."""
        print(f"looking up {ticket_id}", flush=True)
        await anyio.sleep(float(os.environ.get("LOOKUP_SECONDS", "0")))  # a slow API
        return {"id": ticket_id, "title": "Customer locked out after SSO change"}

    @tools.tool(policy="idempotency_key", approval=approval)  # the help desk dedupes by key
    async def reply_to_customer(
        ticket_id: str, message: str, ctx: tether.ToolContext
    ) -> dict[str, Any]:
        """Send a reply to the customer."""
        return helpdesk.send(ticket_id, message, key=ctx.idempotency_key)

    return tools


def scripted_model() -> tether.ScriptedModel:
    """The model's answers, written down: the same every time, no API key needed."""
    use = tether.ScriptedModel.tool_use
    return tether.ScriptedModel(
        [
            [use("toolu_01", "get_ticket", {"ticket_id": "KITE-142"})],
            [
                use(
                    "toolu_02",
                    "reply_to_customer",
                    {"ticket_id": "KITE-142", "message": "Sign in again: SSO is fixed."},
                )
            ],
            "Replied to KITE-142.",
        ]
    )


def make_model() -> tether.Model:
    """Claude when ``ANTHROPIC_API_KEY`` is set, else the scripted answers."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return tether.AnthropicModel("claude-sonnet-4-6")
    return scripted_model()


async def main(run_id: str, tools: tether.ToolRegistry) -> None:
    """Start ``run_id`` (or resume it) and print how it ends."""
    store = tether.FileStore("tether-data")
    async with tether.Supervisor(store, model=make_model(), tools=tools) as sup:
        if not await store.exists(run_id):
            await sup.start(run_id, "Ticket KITE-142 just came in.", system="You are support.")
        status = await sup.wait(run_id)  # until it is done, failed, or waits for a person
        view = await sup.inspect(run_id)
        print(f"{run_id}: {status.value}", view.final_text or view.reason)


if __name__ == "__main__":
    run_id = sys.argv[1] if len(sys.argv) > 1 else "ticket-142"
    anyio.run(main, run_id, make_tools(Helpdesk("replies.jsonl")))
