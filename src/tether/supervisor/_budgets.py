"""Whether a run is over one of its budgets: the one check the loop and ``retry`` both use.

Budgets are counted from the journal (model calls, tool calls, tokens including the prompt
cache's, wall-clock time from the run's start), so a crash loop cannot reset them.
"""

from __future__ import annotations

from ..journal import Budgets
from ._state import RunState


def budget_problem(
    state: RunState,
    now: float,
    *,
    for_model: bool,
    starting: int = 0,
    budgets: Budgets | None = None,
) -> str | None:
    """The budget the run's next step would pass, in words, or ``None``.

    Args:
        now: the wall-clock time (deadlines).
        for_model: the next step is a model call (model calls and tokens are checked); else
            tool calls, ``starting`` more of them.
        budgets: the limits to check (default: the run's own).
    """
    b = state.budgets if budgets is None else budgets
    started = state.started
    assert started is not None
    if b.deadline_s is not None and now > started.at + b.deadline_s:
        return f"deadline of {b.deadline_s:g} s passed"
    if for_model:
        calls = state.model_calls + state.child_model_calls  # its children's count too
        if b.max_model_calls is not None and calls >= b.max_model_calls:
            return f"model call budget exhausted: {calls} of {b.max_model_calls}"
        if b.max_tokens is not None and state.tokens >= b.max_tokens:
            return f"token budget exhausted: {state.tokens} of {b.max_tokens}"
    elif b.max_tool_calls is not None:
        made = state.tool_calls + state.child_tool_calls
        if made + starting > b.max_tool_calls:
            return (
                f"tool call budget exhausted: {made} made, {starting} more needed, "
                f"limit {b.max_tool_calls}"
            )
    return None


def limits_problem(budgets: Budgets) -> str | None:
    """What is wrong with ``budgets`` as a caller gave them, or ``None``: each limit is
    ``None`` (unlimited) or a number of the type it declares, not below zero (a run started
    with ``max_model_calls=-1`` could only fail)."""
    for name in budgets.__struct_fields__:
        value = getattr(budgets, name)
        if value is None:
            continue
        kind = (int, float) if name == "deadline_s" else (int,)
        if isinstance(value, bool) or not isinstance(value, kind):
            want = "a number of seconds" if name == "deadline_s" else "a whole number"
            return f"budgets {name}={value!r}: expected {want} or None"
        if value < 0:
            return f"budgets {name}={value!r}: a limit cannot be below zero"
    return None
