"""The outside world the demo agents act on: a help desk and a mail service.

Both live in their own files under the demo's root and are opened fresh by every call, so a
process that is killed keeps nothing of them in memory, exactly like a real remote service.
Both deduplicate by idempotency key the way Stripe's API and many others do: a request whose key
was seen before gets the original result back and changes nothing. ``told`` is how a demo's
tool says what the service did, in the demo's timeline.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HELPDESK_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id       TEXT NOT NULL,
    customer        TEXT NOT NULL,
    message         TEXT NOT NULL,
    idempotency_key TEXT UNIQUE
)
"""


@dataclass(frozen=True)
class Delivery:
    """What a service answered: the id of the reply or email, and whether it was a repeat."""

    id: int
    duplicate: bool


def told(service: str, verb: str, thing: str, to: str, sent: Delivery, key: str | None) -> str:
    """What ``service`` says on a demo's timeline about one send (``verb``: "sent", ``thing``:
    "reply"), which returned ``sent`` for idempotency key ``key``."""
    if sent.duplicate:
        return f"  {service}: key {key} seen before, returned {thing} #{sent.id}, {verb} nothing"
    with_key = f"key {key}" if key else "no idempotency key"
    return f"  {service}: {verb} {thing} #{sent.id} to {to} ({with_key})"


class HelpDesk:
    """A help desk in one SQLite file: ``replies(id, ticket_id, customer, message, key)``.

    A reply with an idempotency key that is already in the table is not sent again; the
    original reply's id comes back instead. A reply without a key is always sent.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.execute(_HELPDESK_SCHEMA)
        return db

    def send_reply(
        self, ticket_id: str, customer: str, message: str, idempotency_key: str | None
    ) -> Delivery:
        """Send ``message`` to ``customer`` on ``ticket_id``, once per idempotency key."""
        with contextlib.closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                if idempotency_key is not None:
                    row = db.execute(
                        "SELECT id FROM replies WHERE idempotency_key = ?", (idempotency_key,)
                    ).fetchone()
                    if row is not None:
                        db.execute("COMMIT")
                        return Delivery(id=int(row[0]), duplicate=True)
                cursor = db.execute(
                    "INSERT INTO replies (ticket_id, customer, message, idempotency_key) "
                    "VALUES (?, ?, ?, ?)",
                    (ticket_id, customer, message, idempotency_key),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            assert cursor.lastrowid is not None
            return Delivery(id=cursor.lastrowid, duplicate=False)

    def count(self, ticket_id: str | None = None) -> int:
        """How many replies went out (on ``ticket_id``, or on any ticket)."""
        if not self.path.exists():
            return 0
        with contextlib.closing(self._connect()) as db:
            if ticket_id is None:
                (n,) = db.execute("SELECT COUNT(*) FROM replies").fetchone()
            else:
                (n,) = db.execute(
                    "SELECT COUNT(*) FROM replies WHERE ticket_id = ?", (ticket_id,)
                ).fetchone()
            return int(n)


class Outbox:
    """A mail service that delivers by appending one JSON line per email to a file.

    An email whose idempotency key is already in the file is not delivered again. The file is
    locked (``flock``) while a send checks and appends, and fsync'd before the send returns.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, subject: str, body: str, idempotency_key: str | None) -> Delivery:
        """Deliver one email, once per idempotency key."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            sent = self._read(fd)
            if idempotency_key is not None:
                for email in sent:
                    if email.get("idempotency_key") == idempotency_key:
                        return Delivery(id=int(email["id"]), duplicate=True)
            email_id = len(sent) + 1
            line = {
                "id": email_id,
                "to": to,
                "subject": subject,
                "body": body,
                "idempotency_key": idempotency_key,
            }
            os.write(fd, (json.dumps(line) + "\n").encode())
            os.fsync(fd)
            return Delivery(id=email_id, duplicate=False)
        finally:
            os.close(fd)  # also releases the lock

    def emails(self) -> list[dict[str, Any]]:
        """Every email delivered so far, oldest first."""
        if not self.path.exists():
            return []
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return self._read(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _read(fd: int) -> list[dict[str, Any]]:
        chunks = []
        offset = 0
        while chunk := os.pread(fd, 65536, offset):
            chunks.append(chunk)
            offset += len(chunk)
        text = b"".join(chunks).decode()
        return [json.loads(line) for line in text.splitlines() if line.strip()]
