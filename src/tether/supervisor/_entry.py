"""What the supervisor keeps and reports per run: its view, its status changes, its entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from ._state import RunStatus
from ._status import Outcome


@dataclass(frozen=True)
class RunView:
    """A run as ``Supervisor.inspect`` sees it, computed from its journal."""

    run_id: str
    status: RunStatus
    reason: str
    messages: list[dict[str, Any]]
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    restarts: int
    pending: tuple[str, ...]
    final_text: str | None
    events: int


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
    with nobody waiting on them, so thousands of parked runs hold neither.
    """

    status: RunStatus = RunStatus.RUNNING
    reason: str = ""
    pending: tuple[str, ...] = ()
    scope: anyio.CancelScope | None = None
    driving: bool = False
    parent: tuple[str, str] | None = None  # (run, call) of the run that waits for this one
    remote: bool = False
    seen: tuple[int, int] | None = None
    _changed: anyio.Event | None = None
    _lock: anyio.Lock | None = None

    @property
    def lock(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    def changed(self) -> anyio.Event:
        """An event set at the next status change."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def set(self, outcome: Outcome) -> None:
        self.status, self.reason, self.pending = outcome.status, outcome.reason, outcome.pending
        self.remote = False
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def release_idle_lock(self) -> None:
        lock = self._lock
        if lock is not None and not lock.locked() and lock.statistics().tasks_waiting == 0:
            self._lock = None
