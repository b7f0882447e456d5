"""What a running tool may know about the call it serves."""

from __future__ import annotations

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
        tool: the registered name of the tool the runtime runs this attempt of (``""`` for
            a context made by hand). A context is its attempt's own only for that tool: a
            tool that invokes another with its own context (a composite) passes a context
            whose ``tool`` is not the other's, so that one cannot say "nothing of this
            attempt was sent" for it (``ToolUnavailableError(attempt=ctx)``).
    """

    run_id: str
    call_id: str
    attempt: int
    tool: str = ""

    @property
    def idempotency_key(self) -> str:
        """``f"{run_id}:{call_id}"``: the same on every attempt and in every process.

        Pass it to the receiving system (an ``Idempotency-Key`` header, a unique column) so that
        running the call again cannot repeat its effect. It does not include ``attempt`` on
        purpose: all attempts of one call are one operation.
        """
        return f"{self.run_id}:{self.call_id}"
