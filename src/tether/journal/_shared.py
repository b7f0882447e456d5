"""A store several holders enter: opened by the first entry, closed by the last exit.

A store is entered by whoever uses it: a script's ``async with store:``, and each
``Supervisor`` given it (one after another in a script or a notebook, or side by side in one
service). ``SharedEntry`` counts them, so that the first entry opens the store (its threads,
pool, listener), the last exit closes it, and a store closed so opens again at its next
entry. ``aclose`` closes it at once, whoever still holds it; they get the store's "closed"
error on their next use, and may enter it again.

Opening and closing take time (they wait on threads or a database): an entry that comes while
the store is opening waits for it to be open, and one that comes while it is closing waits
for it to be closed, then opens it again.

A store whose open state includes tasks (``PostgresStore``: its lease renewer and change
listener, in a task group) can only be closed by the task that opened it, so it is made with
``one_task``: while open, it refuses an entry from any other task, at entry and with a message
saying what to do, instead of failing later when the last holder leaves. Entries nested in one
task (the application's ``async with store:`` around its supervisors) leave in the reverse
order and need no more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import anyio


@final
class SharedEntry:
    """The holders of one store, and whether it is open.

    Args:
        open: opens the store; on failure it leaves nothing open (the entry raises).
        close: closes what ``open`` opened; shielded by its caller's contract (it must finish).
        one_task: refuse entries from another task than the one that opened the store, with
            ``one_task`` as the message's reason.
    """

    def __init__(
        self,
        open: Callable[[], Awaitable[None]],
        close: Callable[[], Awaitable[None]],
        *,
        one_task: str | None = None,
    ) -> None:
        self._open = open
        self._close = close
        self._one_task = one_task
        self._opener: int | None = None
        self.holders = 0
        self.closed_once = False
        """Whether the store was open once and is not now (for the message of a late use)."""
        self._moving: anyio.Event | None = None  # set while opening or closing

    @property
    def open(self) -> bool:
        """Entered by someone, and not closing."""
        return self.holders > 0 and self._moving is None

    async def enter(self) -> None:
        """Count one more holder; open the store if nobody holds it.

        Raises:
            RuntimeError: a ``one_task`` store open in another task.
            whatever opening raises (the holder is not counted then).

        On cancellation: an entry that was opening the store leaves it closed.
        """
        while self._moving is not None:
            await self._moving.wait()
        task = anyio.get_current_task().id
        if self.holders:
            if self._one_task is not None and task != self._opener:
                raise RuntimeError(self._one_task)
            self.holders += 1
            return
        self._moving = moving = anyio.Event()
        try:
            await self._open()
            self.holders = 1
            self._opener = task
        finally:
            self._moving = None
            moving.set()

    async def leave(self) -> None:
        """Count one holder less; close the store when it was the last. Idempotent past
        zero (a store ``aclose`` closed meanwhile has no holders left)."""
        if self.holders == 0:
            return
        self.holders -= 1
        if self.holders == 0:
            await self._closing()

    async def aclose(self) -> None:
        """Close the store now, whoever holds it. Idempotent."""
        while self._moving is not None:
            await self._moving.wait()
        self.holders = 0
        await self._closing()

    async def _closing(self) -> None:
        self._moving = moving = anyio.Event()
        try:
            await self._close()
        finally:
            self.closed_once = True
            self._moving = None
            moving.set()
