"""Whether a person's answer (a decision, a resolution, a cancellation) fits the run's state.

One check serves every way an answer arrives: ``Supervisor.decide``/``resolve``/``cancel`` and
answers queued in a run's inbox, which the owner checks again when it folds them in (so an
answer delivered twice is ignored the second time).
"""

from __future__ import annotations

from ..journal._records import AnyEvent, Decision, Event, Resolved, RunFinished
from ._loop import Runtime, spec_for
from ._state import RunState


def answer_problem(state: RunState, rt: Runtime, answer: Event | AnyEvent) -> str | None:
    """Why ``answer`` cannot be recorded now, or ``None`` if it can."""
    if state.finished is not None:
        return f"run already {state.finished.status}"
    if isinstance(answer, RunFinished):
        return None
    if isinstance(answer, Decision):
        call = state.calls.get(answer.call_id)
        if call is None or call.done:
            return f"call {answer.call_id!r} is not awaiting a decision"
        spec = spec_for(state, rt, call.name)
        if spec is not None and not spec.approval:
            return f"tool {call.name!r} does not require approval"
        if call.escalated:
            return f"call {answer.call_id!r} is escalated; answer it with resolve()"
        if call.decision is not None:
            return f"call {answer.call_id!r} was already decided"
        return None
    if isinstance(answer, Resolved):
        call = state.calls.get(answer.call_id)
        if call is None or call.done or not call.escalated:
            return f"call {answer.call_id!r} is not waiting for a resolution"
        return None
    return f"a {type(answer).__name__} record is not an answer a person can give"
