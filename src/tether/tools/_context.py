"""What a running tool may know about the call it serves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import final


@final
@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """The identity of one tool call, passed to tools that declare a ``ToolContext`` parameter.

    Every value comes from the run's journal, so a resumed process builds the same context
    for the same call.

    Attributes:
        run_id: the run the call belongs to.
        call_id: the model's id for the call (the ``tool_use`` block's ``id``).
        attempt: 1 on the first attempt, then one more each time the call is started again
            (after a crash, a retry or a person's "run it again").
    """

    run_id: str
    call_id: str
    attempt: int

    @property
    def idempotency_key(self) -> str:
        """``f"{run_id}:{call_id}"``: the same on every attempt and in every process.

        Pass it to the receiving system (an ``Idempotency-Key`` header, a unique column) so that
        running the call again cannot repeat its effect. It does not include ``attempt`` on
        purpose: all attempts of one call are one operation.
        """
        return f"{self.run_id}:{self.call_id}"


_ATTEMPTING: ContextVar[tuple[str, ToolContext] | None] = ContextVar(
    "tether_attempting", default=None
)


@contextmanager
def attempting(tool: str, ctx: ToolContext) -> Iterator[None]:
    """While the runtime runs attempt ``ctx`` of a call of tool ``tool`` (the tool's registered
    name): what ``is_attempting`` asks about. Code the tool runs inside it (a composite's call
    of another tool's ``invoke`` with its own context) sees the same, so that only ``tool``'s
    own function can say "this attempt"."""
    token = _ATTEMPTING.set((tool, ctx))
    try:
        yield
    finally:
        _ATTEMPTING.reset(token)


def is_attempting(tool: str, ctx: ToolContext) -> bool:
    """Whether the runtime is running attempt ``ctx`` of tool ``tool`` itself, here and now:
    an adapter that binds its ``ToolUnavailableError`` to ``ctx`` only then does not bind it
    for another tool that invoked it with its own context (which may have had an effect
    first)."""
    return _ATTEMPTING.get() == (tool, ctx)
