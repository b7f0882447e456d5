"""The change listener: ``LISTEN`` on a connection of its own, so sweeps run when a run changes.

A ``NOTIFY`` (an answer queued or recorded, a run released) wakes ``Changes.wait``. A lost
connection is reconnected, and counts as a change (something may have changed while nobody
listened); the workers' sweeps also run on their interval, should a notification be missed.
"""

from __future__ import annotations

import logging
from typing import final

import anyio

from ._connection import SESSION_SETTINGS

log = logging.getLogger("tether.postgres")

KEEPALIVE_TIMEOUT = 5.0
"""Seconds the listener's keepalive statement may take before the connection counts as lost."""
LISTEN_KEEPALIVE = 5.0
"""Seconds between the listener's looks at its connection (``SELECT 1``)."""


@final
class Changes:
    """Notifications on ``channel``, served by ``listen`` (run it in the store's task group)."""

    def __init__(self, dsn: str, channel: str) -> None:
        self._dsn = dsn
        self._channel = channel
        self._change = anyio.Event()

    async def wait(self) -> None:
        """Return at the next notification."""
        await self._change.wait()

    def _notified(self, *_args: object) -> None:
        self._change.set()
        self._change = anyio.Event()

    async def listen(self) -> None:
        """LISTEN for changes on a connection of its own; reconnect when it drops."""
        import asyncpg

        while True:
            try:
                conn = await asyncpg.connect(self._dsn, server_settings=SESSION_SETTINGS)
            except Exception as exc:  # sweeps still find every change, later
                log.warning("cannot listen for changes (%s); sweeps still run", exc)
                await anyio.sleep(LISTEN_KEEPALIVE)
                continue
            try:
                await conn.add_listener(self._channel, self._notified)
                while True:
                    await anyio.sleep(LISTEN_KEEPALIVE)
                    # Not cancelled halfway: a connection terminated with a statement in
                    # flight leaves the driver a future nobody retrieves (an ERROR logged at
                    # a clean stop). The keepalive takes a moment, or its timeout.
                    with anyio.CancelScope(shield=True):
                        await conn.execute("SELECT 1", timeout=KEEPALIVE_TIMEOUT)
            except Exception as exc:
                log.warning("change listener disconnected (%s); reconnecting", exc)
                self._notified()  # something may have changed while nobody listened
            finally:
                conn.terminate()
