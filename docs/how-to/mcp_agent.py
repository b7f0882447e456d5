"""An agent whose tools come from an MCP server: ``python mcp_agent.py RUN_ID``."""

from __future__ import annotations

import sys

import anyio

import tether
from tether.mcp import MCPServer, ToolOptions

tools = tether.ToolRegistry()
tools.add_source(
    MCPServer(
        "notes",
        command=[sys.executable, "notes_server.py"],  # over stdio; or url="http://.../mcp"
        trusted=True,  # believe its annotations: search_notes is read-only, so "rerun"
        tools={"add_note": ToolOptions(policy="escalate", timeout=30)},  # the app decides
        prefix="",  # "notes_" would keep two servers' tools apart
    )
)

use = tether.ScriptedModel.tool_use
model = tether.ScriptedModel(
    [
        [use("toolu_01", "add_note", {"note": "KITE-142: SSO fixed on 1 Dec"})],
        [use("toolu_02", "search_notes", {"text": "KITE-142"})],
        "The note is saved.",
    ]
)


async def main(run_id: str) -> None:
    store = tether.FileStore("tether-data")
    # Entering the supervisor opens a session to the server and registers its tools.
    async with tether.Supervisor(store, model=model, tools=tools) as sup:
        if not await store.exists(run_id):
            await sup.start(run_id, "Note that SSO is fixed for KITE-142.")
        status = await sup.wait(run_id)
        view = await sup.inspect(run_id)
        print(run_id, status.value, view.final_text or view.reason)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
