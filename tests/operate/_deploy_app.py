"""Deploys of one application for the deploy tests. The agent looks an order up (a person
approves it), then notifies the customer. ``v1`` is what runs start with; the others change
``notify`` under the same version:

- ``v2``: a new optional parameter, not declared compatible: runs on v1 would stop;
- ``v2c``: the same change, declared ``compatible=True``: runs take it over;
- ``v2bad``: ``customer`` renamed, declared compatible (it is not: runs would stop);
- ``both``: notify v1 kept beside a new notify v2 (the side-by-side deploy pattern).
"""

from __future__ import annotations

from typing import Any

import tether
from tether.models import Message
from tether.supervisor import WorkerApp

use = tether.ScriptedModel.tool_use
SENT: list[str] = []


def script(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step == 0:
        return [use("toolu_l", "lookup", {"order": "o-1"})]
    if step == 1:
        return [use("toolu_n", "notify", {"customer": "c-1"})]
    return "done"


def _base() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", approval=True)
    async def lookup(order: str) -> str:
        """Look an order up."""
        return f"{order} is late"

    return tools


def _notify_v1(tools: tether.ToolRegistry, **options: Any) -> None:
    @tools.tool(policy="idempotency_key", **options)
    async def notify(customer: str) -> str:
        """Tell the customer."""
        SENT.append(f"v1 {customer}")
        return f"told {customer}"


def _notify_v2(tools: tether.ToolRegistry, **options: Any) -> None:
    @tools.tool(policy="idempotency_key", **options)
    async def notify(customer: str, channel: str = "email") -> str:
        """Tell the customer, on a channel."""
        SENT.append(f"{options.get('version', '1')}+channel {customer} {channel}")
        return f"told {customer} by {channel}"


def tools_for(kind: str) -> tether.ToolRegistry:
    tools = _base()
    if kind == "v1":
        _notify_v1(tools)
    elif kind == "v2":
        _notify_v2(tools)
    elif kind == "v2c":
        _notify_v2(tools, compatible=True)
    elif kind == "v2bad":

        @tools.tool(policy="idempotency_key", compatible=True)
        async def notify(client: str) -> str:
            """Tell the customer."""
            return f"told {client}"

    elif kind == "both":
        _notify_v1(tools)
        _notify_v2(tools, version="2")
    return tools


def app_for(kind: str) -> WorkerApp:
    return WorkerApp(
        model=tether.ScriptedModel(script), tools=tools_for(kind), options={"sweep_interval": 0.1}
    )


def v1() -> WorkerApp:
    return app_for("v1")


def v2() -> WorkerApp:
    return app_for("v2")


def v2c() -> WorkerApp:
    return app_for("v2c")


def v2bad() -> WorkerApp:
    return app_for("v2bad")


def both() -> WorkerApp:
    return app_for("both")
