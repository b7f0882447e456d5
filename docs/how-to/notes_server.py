"""A small MCP server over stdio (the official ``mcp`` SDK): ``python notes_server.py``.

It keeps notes in ``notes.jsonl`` in the current directory. ``search_notes`` says it is
read-only; ``add_note`` says nothing, so it is neither read-only nor idempotent.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

NOTES = Path("notes.jsonl")
server = FastMCP("notes", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def search_notes(text: str) -> list[str]:
    """Find the notes that mention ``text``."""
    lines = NOTES.read_text().splitlines() if NOTES.exists() else []
    return [n for n in (json.loads(line)["note"] for line in lines) if text in n]


@server.tool()
def add_note(note: str) -> str:
    """Add a note."""
    with NOTES.open("a") as out:
        out.write(json.dumps({"note": note}) + "\n")
    return "added"


if __name__ == "__main__":
    server.run("stdio")
