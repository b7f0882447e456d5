"""How a drive reports itself to tracing (``Runtime.telemetry``): what the loop calls, and
nothing at all when tracing is off (see ``_telemetry`` for the seam and what it promises)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from ..models import Message
from ..tools import ToolSpec
from ._resume import cause_of, was_interrupted
from ._runtime import Interruption, Runtime
from ._state import Call, RunState
from ._telemetry import ChatTelemetry, DriveTelemetry, ToolTelemetry

_UNTRACED: AbstractContextManager[None] = nullcontext()
"""The scope of a call when tracing is off: one shared do-nothing manager (it holds no state,
so it can be entered by any number of calls at once), not one allocated per call."""


def open_drive(
    rt: Runtime, state: RunState, run_id: str, *, fresh: bool, prior: Interruption | None
) -> DriveTelemetry | None:
    """Begin reporting one drive of ``run_id``, in the trace its start journaled."""
    telemetry = rt.telemetry
    if telemetry is None or state.started is None:
        return None
    resumed = not fresh and state.finished is None and was_interrupted(state, rt.clock())
    return telemetry.drive(
        run_id=run_id,
        trace=state.started.trace,
        model=state.manifest.model,
        fresh=fresh,
        restarts=state.restarts + (1 if resumed and (prior or cause_of(state)).charged else 0),
        cause=(prior or cause_of(state)).cause if resumed else "",
    )


def chat_scope(
    trace: DriveTelemetry | None, state: RunState, messages: list[Message]
) -> AbstractContextManager[ChatTelemetry | None]:
    """Around one model call: its report, or nothing."""
    if trace is None:
        return _UNTRACED
    return trace.chat(system=state.manifest.system_prompt, messages=messages)


def tool_scope(
    trace: DriveTelemetry | None,
    call: Call,
    spec: ToolSpec,
    attempt: int,
    *,
    seq: int,
    dangling: bool,
    verify: bool = False,
) -> AbstractContextManager[ToolTelemetry | None]:
    """Around one tool attempt (or ``verify`` check): its report, or nothing."""
    if trace is None:
        return _UNTRACED
    return trace.tool(
        name=call.name,
        call_id=call.id,
        attempt=attempt,
        policy=spec.policy.value,
        dangling=dangling,
        arguments=call.input,
        seq=seq,
        verify=verify,
    )
