"""The support agent of the tutorial after a change to its reply tool, two ways.

``changed:build`` adds a *required* parameter (``channel``): a run that started on the old
contract cannot go on under it. ``changed:build_compatible`` adds an *optional* one
(``signature``) and says ``compatible=True``: the old contract's every call is still valid.
"""

from __future__ import annotations

from typing import Any

from approval import build as build_v1
from helpdesk import Helpdesk

import tether
from tether.supervisor import WorkerApp

helpdesk = Helpdesk("replies.jsonl")


def _replace_reply(tools: tether.ToolRegistry, *, compatible: bool) -> None:
    tools.unregister("reply_to_customer")
    if compatible:

        @tools.tool(
            name="reply_to_customer", policy="idempotency_key", approval=True, compatible=True
        )
        async def reply_signed(
            ticket_id: str, message: str, ctx: tether.ToolContext, signature: str = ""
        ) -> dict[str, Any]:
            """Send a reply to the customer."""
            return helpdesk.send(ticket_id, f"{message} {signature}".strip(), ctx.idempotency_key)

    else:

        @tools.tool(policy="idempotency_key", approval=True)
        async def reply_to_customer(
            ticket_id: str, message: str, channel: str, ctx: tether.ToolContext
        ) -> dict[str, Any]:
            """Send a reply to the customer on a channel (email, chat)."""
            return helpdesk.send(ticket_id, f"[{channel}] {message}", ctx.idempotency_key)


def build() -> WorkerApp:
    """The agent with a new required parameter: incompatible."""
    app = build_v1()
    _replace_reply(app.tools, compatible=False)
    return app


def build_compatible() -> WorkerApp:
    """The agent with a new optional parameter, declared compatible."""
    app = build_v1()
    _replace_reply(app.tools, compatible=True)
    return app
