"""An application whose tools all come from the test MCP server (``tests/mcp/_server.py``),
for ``tether check`` and ``tether repin``: the server keeps its files in ``$MCP_APP_WORLD``,
and ``$MCP_APP_COMMAND`` (a command line, as JSON) replaces the server's when set."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import tether
from tether.mcp import MCPServer, ToolOptions
from tether.models import Message
from tether.supervisor import WorkerApp

from ..mcp._helpers import stdio_server

use = tether.ScriptedModel.tool_use


def _script(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step == 0:
        return [use("toolu_l", "lookup", {"ticket": "K-1"})]
    if step == 1:
        return [use("toolu_r", "send_reply", {"ticket": "K-1", "text": "on it"})]
    return "replied"


def app() -> WorkerApp:
    world = pathlib.Path(os.environ["MCP_APP_WORLD"])
    options = {"send_reply": ToolOptions(approval=True)}
    command = os.environ.get("MCP_APP_COMMAND")
    server = (
        stdio_server(world, tools=options, trusted=True)
        if command is None
        else MCPServer("helpdesk", command=json.loads(command), tools=options, trusted=True)
    )
    tools = tether.ToolRegistry()
    tools.add_source(server)
    return WorkerApp(model=tether.ScriptedModel(_script), tools=tools)
