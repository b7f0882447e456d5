"""A help-desk agent whose tools all come from an MCP server, as a crash-test scenario.

The server (``examples/helpdesk_mcp_server.py``, on the ``mcp`` SDK's server side) is started
over stdio by every process that runs the agent, and keeps its state in a SQLite file under the
scenario's root. The application trusts it (``trusted=True``) and knows it deduplicates
replies by the key tether sends in ``_meta`` (``idempotency_key=True``), so the policies come
from its annotations:

=================  ==========================  ==========================================
tool               policy (why)                a dangling call after a kill
=================  ==========================  ==========================================
``lookup_ticket``  ``rerun`` (readOnlyHint)    is read again
``send_reply``     ``idempotency_key`` (no     is sent again with the same key; the server
                   hints; the server honours   answers as the first time and emails
                   the key); approval first    nothing
``set_status``     ``rerun`` (idempotentHint)  sets the same status again
=================  ==========================  ==========================================

    tether crashtest examples.helpdesk_mcp:scenario
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tether.models import Message, Model, ScriptedModel, blocks_of
from tether.testing import Scenario
from tether.tools import ToolRegistry

SERVER = Path(__file__).with_name("helpdesk_mcp_server.py")
TICKET = "KITE-7"
REPLY = "Sign-in works again: we reset your SSO link."


def script(messages: list[Message]) -> Any:
    """One tool call per turn, then an answer naming the reply the server sent."""
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    steps = [
        ("lookup_ticket", {"ticket": TICKET}),
        ("send_reply", {"ticket": TICKET, "text": REPLY}),
        ("set_status", {"ticket": TICKET, "status": "solved"}),
    ]
    if turn < len(steps):
        name, args = steps[turn]
        return [ScriptedModel.tool_use(f"toolu_{turn + 1:02d}", name, args)]
    result = blocks_of(messages[4])[0]  # the result of send_reply
    reply = result.get("content")
    return f"{TICKET}: replied ({reply}) and marked solved."


def scenario(root: Path) -> Scenario:
    """Ticket KITE-7 through an MCP server's tools; the reply is approved."""

    def build() -> tuple[Model, ToolRegistry]:
        from tether.mcp import MCPServer, ToolOptions  # the mcp extra, in the child only

        tools = ToolRegistry()
        helpdesk = MCPServer(
            "helpdesk",
            command=[sys.executable, str(SERVER), str(root)],
            trusted=True,
            idempotency_key=True,
            tools={"send_reply": ToolOptions(approval=True)},
        )
        tools.add_source(helpdesk)
        return ScriptedModel(script), tools

    def ledger() -> Counter[str]:
        """What the help desk really did: one count per reply, the status each ticket has."""
        if not (root / "helpdesk.db").exists():
            return Counter()
        db = sqlite3.connect(root / "helpdesk.db")
        with contextlib.closing(db):
            replies = db.execute("SELECT ticket FROM replies").fetchall()
            statuses = db.execute("SELECT ticket, status FROM statuses").fetchall()
        return Counter(
            [f"reply {t}" for (t,) in replies] + [f"status {t} {s}" for t, s in statuses]
        )

    return Scenario(
        run_id="run-kite-7", prompt=f"Handle ticket {TICKET}.", build=build, ledger=ledger
    )
