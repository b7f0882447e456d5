"""A pydantic-ai agent whose tools are a real MCP server's, over stdio, as a tether run.

The agent is a plain ``pydantic_ai.Agent`` with one toolset, pydantic-ai's own ``MCPToolset``
on a stdio transport that starts the help desk server (``examples/helpdesk_mcp_server.py``). Its
model is pydantic-ai's offline ``FunctionModel``, whose answers are chosen from the messages
alone: look ticket KITE-7 up, email the customer, mark the ticket solved, then say so.
``TetherAgent`` makes its runs tether runs; the options say what pydantic-ai does not know:
``lookup_ticket`` and ``set_status`` are safe to run again, and ``send_reply`` is deduplicated by
its idempotency key, which the toolset's ``process_tool_call`` sends in the request's ``_meta``
(``ctx.run_id`` and ``ctx.tool_call_id``, the same in every process), the key the server reads.

Every request the model really gets is logged to ``requests.log`` under the scenario's root.

    tether crashtest examples.pydantic_ai_mcp_agent:scenario
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, RunContext
from pydantic_ai.mcp import CallToolFunc, MCPToolset, ToolResult
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from examples import helpdesk_mcp
from examples.helpdesk_mcp_server import IDEMPOTENCY_KEY_META
from examples.pydantic_ai_agent import logged_model
from tether.integrations.pydantic_ai import TetherAgent
from tether.testing import Scenario

TICKET = helpdesk_mcp.TICKET
REPLY = helpdesk_mcp.REPLY
STEPS = [
    ("lookup_ticket", {"ticket": TICKET}),
    ("send_reply", {"ticket": TICKET, "text": REPLY}),
    ("set_status", {"ticket": TICKET, "status": "solved"}),
]


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: one MCP tool call per turn, then an answer naming the reply sent."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if len(returns) < len(STEPS):
        name, args = STEPS[len(returns)]
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{len(returns)}")])
    return ModelResponse(
        parts=[TextPart(f"{TICKET}: replied ({returns[1].content}) and marked solved.")]
    )


async def with_key(
    ctx: RunContext[Any], call: CallToolFunc, name: str, args: dict[str, Any]
) -> ToolResult:
    """Send each call's idempotency key in its ``_meta``: the run's and the call's ids."""
    return await call(
        name, args, metadata={IDEMPOTENCY_KEY_META: f"{ctx.run_id}:{ctx.tool_call_id}"}
    )


def helpdesk(root: Path) -> MCPToolset[Any]:
    """pydantic-ai's MCP toolset on the help desk server over stdio (its world under ``root``)."""
    transport = StdioTransport(sys.executable, [str(helpdesk_mcp.SERVER), str(root)])
    return MCPToolset(transport, id="helpdesk", process_tool_call=with_key)


def durable_agent(root: Path, server: MCPToolset[Any] | None = None) -> TetherAgent[str]:
    """The agent on tether, its model logging each real request under ``root``."""
    agent = Agent(
        logged_model(root, respond),
        instructions="You are Kitebase's help desk. Solve the customer's ticket.",
        name="helpdesk",
        toolsets=[server or helpdesk(root)],
    )
    return TetherAgent(
        agent,
        tools={
            "lookup_ticket": {"policy": "rerun"},
            "send_reply": {"policy": "idempotency_key"},
            "set_status": {"policy": "rerun"},
        },
    )


def scenario(root: Path) -> Scenario:
    """Ticket KITE-7 through the help desk's MCP tools, by a pydantic-ai agent."""

    def build() -> tuple[Any, Any]:
        agent = durable_agent(root)
        return agent.model, agent.tools

    return Scenario(
        run_id="run-kite-7",
        prompt=f"Handle ticket {TICKET}.",
        build=build,
        ledger=helpdesk_mcp.scenario(root).ledger,
    )
