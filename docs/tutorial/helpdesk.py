"""A stand-in for a help desk's API: it sends replies and deduplicates them by key.

It keeps what it sent in a file (one JSON line per reply), so that a process killed with
``SIGKILL`` cannot take the record of a sent reply with it. A real help desk deduplicates on
its side, by the key you send with each request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Helpdesk:
    """Replies sent, kept in ``path``; with ``dedupe=False``, a help desk that ignores keys."""

    def __init__(self, path: str | Path = "replies.jsonl", *, dedupe: bool = True) -> None:
        self.path = Path(path)
        self.dedupe = dedupe

    def sent(self) -> list[str]:
        """Every reply really sent, one item per reply."""
        if not self.path.exists():
            return []
        return [
            f"reply to {json.loads(line)['ticket']}" for line in self.path.read_text().splitlines()
        ]

    def send(self, ticket_id: str, message: str, key: str) -> dict[str, Any]:
        """Send ``message`` on ``ticket_id`` once per ``key``; a repeat is answered as the first."""
        if self.dedupe and self.path.exists():
            for line in self.path.read_text().splitlines():
                if json.loads(line)["key"] == key:
                    print(f"help desk: already sent with key {key}, not sending again", flush=True)
                    return {"sent": True}
        with self.path.open("a") as out:
            out.write(json.dumps({"ticket": ticket_id, "message": message, "key": key}) + "\n")
        print(f"help desk: sent to {ticket_id}: {message!r} (key {key})", flush=True)
        return {"sent": True}
