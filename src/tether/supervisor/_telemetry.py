"""The seam through which a run's work is reported to tracing (``tether.otel``), if at all.

The loop knows nothing of OpenTelemetry: it reports what it really does, when it does it,
through these protocols, and ``Runtime.telemetry`` is ``None`` unless the application asked
for tracing (then every hook costs one ``is None`` test, and nothing is imported).

What the loop reports is what this process did, never what the journal says an earlier
process did: a drive that replays a recorded answer reports no model call for it, and a
dangling call run again is a new tool attempt that says it dangled. That is the whole of
"replay-honest": the hooks sit beside the calls, not beside the fold.

- ``RunTelemetry.start_run`` is around the creation of a run by ``Supervisor.start`` (and
  ``run_context`` is asked as a child run's record is made): what it gives (a W3C trace
  context, ``{"traceparent": ...}``) is journaled in ``run_started``, so every later drive, in
  any process, reports into the same trace. A start the store refuses (the run exists)
  reports nothing.
- ``RunTelemetry.drive`` opens one drive of one run (``begin`` to ``end``).
- ``DriveTelemetry.chat`` and ``DriveTelemetry.tool`` are context managers around one model
  call and one tool attempt (or ``verify`` check); the work runs inside them, so spans the
  model's client or the tool open themselves nest under them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..journal import Event
from ..models import Message, ModelReply


class ChatTelemetry(Protocol):
    """One model call in flight (an exception out of its block is its failure)."""

    def answered(self, reply: ModelReply, *, seq: int) -> None:
        """The model answered; its answer is durable as record ``seq``."""
        ...


class ToolTelemetry(Protocol):
    """One tool attempt (or ``verify`` check) in flight."""

    def ended(self, outcome: Event, *, seq: int) -> None:
        """The attempt ended as ``outcome`` (a result, a failure, a wait), durable as ``seq``."""
        ...


class DriveTelemetry(Protocol):
    """One drive of one run in this process."""

    def chat(
        self, *, system: Any, messages: Sequence[Message]
    ) -> AbstractContextManager[ChatTelemetry]:
        """Around one model call with this conversation."""
        ...

    def tool(
        self,
        *,
        name: str,
        call_id: str,
        attempt: int,
        policy: str,
        dangling: bool,
        arguments: Any,
        seq: int,
        verify: bool = False,
    ) -> AbstractContextManager[ToolTelemetry]:
        """Around one tool attempt, started as record ``seq``; ``dangling``: the attempt
        before it was started and nothing says how it ended (this one runs it again)."""
        ...

    def end(
        self, *, status: str | None, reason: str = "", error: BaseException | None = None
    ) -> None:
        """The drive ended: the run rests as ``status`` (``None``: it was suspended, or
        ended by ``error``)."""
        ...


class RunTelemetry(Protocol):
    """What a ``Supervisor(telemetry=...)`` reports to (``tether.otel.OpenTelemetry``)."""

    def start_run(self, run_id: str) -> AbstractContextManager[dict[str, str] | None]:
        """Around the creation of run ``run_id``: gives the trace context to journal in its
        ``run_started``, and reports the start only if the block ends without an exception
        (the run was created); a refused start (``RunExistsError``) reports nothing."""
        ...

    def run_context(self, run_id: str) -> dict[str, str] | None:
        """The trace context to journal in a new child run's ``run_started``."""
        ...

    def drive(
        self,
        *,
        run_id: str,
        trace: dict[str, str] | None,
        model: str,
        fresh: bool,
        restarts: int,
        cause: str,
    ) -> DriveTelemetry:
        """Begin one drive of run ``run_id``, in the trace ``trace`` its start journaled.

        ``restarts``: how many times the run was taken up again before this drive; ``cause``:
        why this drive resumes it (``""`` for a fresh run)."""
        ...
