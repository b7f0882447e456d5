"""What the loop needs from its supervisor: the ``Runtime``, and how a drive ends early.

The supervisor builds one ``Runtime`` and hands it to every drive: the model and tools, the
clock and sleep (injectable), the gate that lets a suspect run alone, the event that says the
supervisor is stopping, and the store's inbox. Beside it, what a drive asks of it: the tool
version a run pinned, the tool definitions of a run, the blobs a run's results refer to.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from .._errors import UnknownToolError
from ..journal import AnyEvent, Manifest, ToolResult, Waiting
from ..models import Model, ToolDefinition
from ..tools import ToolRegistry, ToolSpec
from ._alone import StepGate
from ._clock import Clock, SystemClock
from ._state import RunState
from ._telemetry import RunTelemetry


class Mailbox(Protocol):
    """Where answers wait for a run whose journal another process held (the store's inbox)."""

    async def has_inbox(self, run_id: str) -> bool: ...

    async def take_inbox(self, run_id: str) -> list[AnyEvent]: ...

    async def clear_inbox(self, run_id: str, count: int) -> None: ...


async def _no_children(state: RunState, waiting: Waiting) -> None:
    raise RuntimeError("this runtime cannot start child runs (it has no supervisor)")


async def _nothing_queued(run_id: str) -> bool:
    return False


def _inbox_unknown(run_id: str) -> bool:
    return False


async def _no_cascade(state: RunState) -> None:
    return None


async def _no_taker(manifest: Manifest) -> str | None:
    return None


async def _no_runs(run_id: str) -> list[AnyEvent]:
    raise RuntimeError("this runtime cannot read other runs (it has no supervisor)")


@dataclass
class Runtime:
    """What the loop needs from its supervisor."""

    model: Model
    tools: ToolRegistry
    load_blob: Callable[[Any], Awaitable[Any]]
    max_restarts: int = 3
    app_version: str = ""
    strict_app_version: bool = False
    model_gate: anyio.Semaphore | None = None
    wall_clock: Clock = field(default_factory=SystemClock)
    jitter: Callable[[], float] = random.random
    host: str = field(default_factory=socket.gethostname)
    mailbox: Mailbox | None = None
    stopping: anyio.Event = field(default_factory=anyio.Event)
    opening: set[anyio.CancelScope] = field(default_factory=set)
    """The scopes of journals being opened (a claim that waits for a database out of reach,
    say): a drain cancels them at once, as nothing of their runs is in flight yet."""
    start_child: Callable[[RunState, Waiting], Awaitable[None]] = _no_children
    read_run: Callable[[str], Awaitable[list[AnyEvent]]] = _no_runs
    on_text: Callable[[str, str], None] | None = None
    gate: StepGate = field(default_factory=StepGate)
    halting: set[str] = field(default_factory=set)  # runs whose drive a cancellation stops
    cancel_queued: Callable[[str], Awaitable[bool]] = _nothing_queued
    no_inbox: Callable[[str], bool] = _inbox_unknown  # surely none now (``Halts.no_inbox``)
    cascade: Callable[[RunState], Awaitable[None]] = _no_cascade
    taker: Callable[[Manifest], Awaitable[str | None]] = _no_taker  # see _fleet
    telemetry: RunTelemetry | None = None
    definitions: dict[tuple[tuple[str, str, str], ...], list[ToolDefinition]] = field(
        default_factory=dict
    )

    @property
    def frozen_messages(self) -> bool:
        """Whether the model keeps read-only messages (``Model``): a run's are frozen for it."""
        return getattr(self.model, "frozen_messages", False) is True

    @property
    def clock(self) -> Callable[[], float]:
        """Wall-clock time, from ``wall_clock`` (deadlines, retry times, records' ``at``)."""
        return self.wall_clock.time

    @property
    def sleep(self) -> Callable[[float], Awaitable[None]]:
        """Waiting on ``wall_clock`` (backoff, a wait's time)."""
        return self.wall_clock.sleep


@dataclass(frozen=True)
class Interruption:
    """Why this process's last drive of a run ended early, as the next ``resumed`` says it."""

    cause: str
    charged: bool


class Suspend(Exception):
    """Raised inside a drive when the supervisor stops: start nothing new, record the stop."""


class LeftForAnother(Exception):
    """Raised inside a drive of a run this process cannot continue while another live worker
    can (``_fleet``): nothing is recorded, the run is let go for that worker."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        super().__init__(f"left for worker {worker}, which has its pinned contracts")


def spec_for(state: RunState, rt: Runtime, name: str) -> ToolSpec | None:
    """The registered version of tool ``name`` that the run pinned, if this process has it."""
    for pin in state.manifest.tools:
        if pin.name == name:
            try:
                return rt.tools.get(pin.name, pin.version)
            except UnknownToolError:
                return None
    return None


def definitions(rt: Runtime, manifest: Manifest) -> list[ToolDefinition]:
    """The tool definitions a run pinned, built once per pinned set (not per model call)."""
    if not manifest.tools:
        return []
    key = tuple((p.name, p.version, p.schema_hash) for p in manifest.tools)
    cached = rt.definitions.get(key)
    if cached is None:
        cached = rt.definitions[key] = rt.tools.definitions(manifest.tools)
    return list(cached)


async def load_blobs(
    rt: Runtime, events: Sequence[AnyEvent], blobs: dict[str, Any], start: int = 0
) -> None:
    """Load every blob the ``events`` from ``start`` on refer to that ``blobs`` lacks."""
    for event in events[start:] if start else events:
        ref = event.blob if isinstance(event, ToolResult) else None
        if ref is not None and ref.digest not in blobs:
            blobs[ref.digest] = await rt.load_blob(ref)
