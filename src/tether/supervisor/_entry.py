"""What the supervisor keeps and reports per run: its entry, its view, its status changes.

``Board`` holds the entries of the runs the supervisor has to remember (a parked run costs only
its entry) and tells each watcher (``Supervisor.events``) of every status change. A finished
run is let go as soon as nothing of the supervisor uses its entry any more (no task, no lock,
no answer being recorded): a worker serving a million runs must not keep a million entries.
Whoever waits on it holds the entry itself, which has its final status; whoever asks later
reads the journal (``Supervisor.wait`` and ``inspect`` do).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import final

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ..models import Message
from ._state import RunState, RunStatus
from ._status import Standing

log = logging.getLogger("tether.supervisor")

EVENT_BUFFER = 10_000
"""Status changes buffered for a slow watcher before changes are dropped."""


@dataclass(frozen=True)
class RunView:
    """A run as ``Supervisor.inspect`` sees it, computed from its journal."""

    run_id: str
    status: RunStatus
    reason: str
    messages: list[Message]
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    restarts: int
    pending: tuple[str, ...]
    final_text: str | None
    events: int

    @classmethod
    def of(cls, run_id: str, state: RunState, outcome: Standing, events: int) -> RunView:
        """The view of a run whose journal (``events`` records) folded to ``state``."""
        return cls(
            run_id=run_id,
            status=outcome.status,
            reason=outcome.reason,
            messages=state.messages,
            model_calls=state.model_calls,
            tool_calls=state.tool_calls,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            restarts=state.restarts,
            pending=outcome.pending,
            final_text=state.final_text,
            events=events,
        )


@dataclass(frozen=True)
class StatusChange:
    """One change of a run's status, as ``Supervisor.events`` reports it."""

    run_id: str
    status: RunStatus
    reason: str
    pending: tuple[str, ...]
    at: float


@dataclass(slots=True)
class Entry:
    """What the supervisor keeps per run. Kept small: a parked run costs only this.

    The lock and the change event are made when first needed and dropped when the run rests
    with nobody waiting on them, so thousands of parked runs hold neither. ``known``: a status
    was set (an entry made only to take a lock, for an answer, knows nothing of the run).
    """

    status: RunStatus = RunStatus.RUNNING
    reason: str = ""
    pending: tuple[str, ...] = ()
    scope: anyio.CancelScope | None = None
    driving: bool = False
    parent: tuple[str, str] | None = None  # (run, call) of the run that waits for this one
    remote: bool = False
    posted: bool = False  # an answer was queued for the run while a task here drove it
    seen: tuple[int, int] | None = None
    known: bool = False
    _changed: anyio.Event | None = None
    _lock: anyio.Lock | None = None

    @property
    def lock(self) -> anyio.Lock:
        if self._lock is None:
            # Taken once per drive, and nearly always free: without ``fast_acquire`` every
            # take also yields to the loop once more (a shielded cancel scope and a trip).
            self._lock = anyio.Lock(fast_acquire=True)
        return self._lock

    def changed(self) -> anyio.Event:
        """An event set at the next status change."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def set(self, outcome: Standing) -> None:
        self.status, self.reason, self.pending = outcome.status, outcome.reason, outcome.pending
        self.remote = False
        self.known = True
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def release_idle_lock(self) -> None:
        lock = self._lock
        if lock is not None and not lock.locked() and lock.statistics().tasks_waiting == 0:
            self._lock = None

    @property
    def idle(self) -> bool:
        """Whether nothing of the supervisor uses the entry: no task, no lock held or awaited.

        (A watcher waiting on ``changed`` holds the entry itself, and needs no board.)
        """
        self.release_idle_lock()
        return self.scope is None and not self.driving and self._lock is None


@final
class Board:
    """The entry of every run the supervisor knows of, and the watchers of their changes.

    Args:
        clock: wall-clock time, stamped on each ``StatusChange``.

    ``forgot`` is called with the id of each run let go (the timers drop its wake-ups).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.runs: dict[str, Entry] = {}
        self.forgot: Callable[[str], None] = _nothing
        self._clock = clock
        self._watchers: set[MemoryObjectSendStream[StatusChange]] = set()

    def entry(self, run_id: str) -> Entry:
        """The run's entry, made if the run had none."""
        entry = self.runs.get(run_id)
        if entry is None:
            entry = self.runs[run_id] = Entry()
        return entry

    def set(self, run_id: str, outcome: Standing, *, quiet: bool = False) -> None:
        """Record a run's new status, wake its waiters and tell every watcher.

        ``quiet``: not logged (a run found already finished is not news). A finished run's
        entry is let go here if nothing uses it, else by ``release`` when its user is done.
        """
        self.entry(run_id).set(outcome)
        if not quiet:
            # A run a person must look at is news even to a worker run with --quiet.
            log.log(
                logging.WARNING if outcome.status is RunStatus.NEEDS_ATTENTION else logging.INFO,
                "run %s is %s%s",
                run_id,
                outcome.status.value,
                f": {outcome.reason}" if outcome.reason else "",
                extra={"run_id": run_id, "status": outcome.status.value, "reason": outcome.reason},
            )
        if not self._watchers:
            return
        change = StatusChange(
            run_id, outcome.status, outcome.reason, outcome.pending, self._clock()
        )
        for send in list(self._watchers):
            try:
                send.send_nowait(change)
            except anyio.WouldBlock:
                log.warning("a status watcher is too slow; dropped a change of run %s", run_id)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._watchers.discard(send)
        if outcome.status.final:
            self.release(run_id)

    def release(self, run_id: str) -> None:
        """Let the run's entry go if it is idle and the run is finished (or the entry knows
        nothing of the run: it was made for a lock, and the lock is free again)."""
        entry = self.runs.get(run_id)
        if entry is not None and entry.idle and (entry.status.final or not entry.known):
            del self.runs[run_id]
            self.forgot(run_id)

    async def changes(self) -> AsyncIterator[StatusChange]:
        """Every status change from now on, until ``close`` (see ``Supervisor.events``)."""
        send, receive = anyio.create_memory_object_stream[StatusChange](EVENT_BUFFER)
        self._watchers.add(send)
        try:
            async with receive:
                async for change in receive:
                    yield change
        finally:
            self._watchers.discard(send)
            send.close()

    def close(self) -> None:
        """End every watcher's iteration."""
        for send in self._watchers:
            send.close()
        self._watchers.clear()


def _nothing(run_id: str) -> None:
    pass
