"""The seeds' design: one SQLite database, one row and one commit per event.

WAL with ``synchronous=FULL`` (``tether.bench.connect_sqlite_events``), the table
``events(run_id, seq, kind, payload, PRIMARY KEY (run_id, seq))``, written from a pool of 16
threads with a connection each (as many threads as tether's store uses for its syncs), one
asyncio task per run driving the agent by hand.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
from _agent import SlowModel, tool_result_message, tool_uses, trivial_tool
from _resources import Sampler, settle, timed_fan_out
from _scale_result import CaseResult

from tether.bench import SQLITE_EVENTS_SCHEMA, connect_sqlite_events
from tether.models import Message

THREADS = 16


class SeedsStore:
    """The events database; each thread of the pool has its own connection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.limiter = anyio.CapacityLimiter(THREADS)
        self.commits = 0
        with contextlib.closing(connect_sqlite_events(path)) as setup:
            setup.execute(SQLITE_EVENTS_SCHEMA)

    def _write(self, run_id: str, seq: int, kind: str, payload: bytes) -> None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect_sqlite_events(self.path)
            with self._lock:
                self._conns.append(conn)
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (run_id, seq, kind, payload))
        self.commits += 1

    async def write(self, run_id: str, seq: int, kind: str, body: Any) -> None:
        """One event, committed (and synced) on a pool thread before this returns."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        await anyio.to_thread.run_sync(
            self._write, run_id, seq, kind, payload, limiter=self.limiter
        )

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


async def case_sqlite(res: CaseResult, root: Path) -> None:
    model = SlowModel(res.latency_ms / 1000)
    db = SeedsStore(root / "events.db")
    sampler = Sampler()
    res.baseline_rss, res.baseline_fds = settle()
    tool_calls = 0

    async def one(i: int) -> None:
        nonlocal tool_calls
        run_id = f"run-{i:05d}"
        messages: list[Message] = [{"role": "user", "content": f"job {i}"}]
        seq = 0

        async def record(kind: str, body: Any) -> None:
            nonlocal seq
            await db.write(run_id, seq, kind, body)
            seq += 1

        await record("run_started", {"messages": messages})
        while True:
            reply = await model(system=None, messages=messages, tools=[])
            message = reply.as_message()
            await record("model_response", message)
            messages.append(message)
            uses = tool_uses(message)
            if not uses:
                await record("run_finished", {"status": "done"})
                return
            results = []
            for use in uses:
                await record("tool_started", {"call_id": use["id"], "name": use["name"]})
                content = await trivial_tool(**use["input"])
                tool_calls += 1
                await record("tool_result", {"call_id": use["id"], "content": content})
                results.append((use["id"], content))
            messages.append(tool_result_message(results))

    try:
        res.wall_s = await timed_fan_out(res.runs, one, sampler)
    finally:
        db.close()
    res.completed = res.runs
    res.steps = model.calls + tool_calls
    res.notes.append(f"commits: {db.commits}")
    res.take(sampler)


def run(res: CaseResult, root: Path) -> None:
    anyio.run(case_sqlite, res, root)
