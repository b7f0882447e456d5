"""Child runs: a run a tool starts (``tether.start_child``), whose end its parent waits for.

A child is a run of its own, created once, after the parent's wait for it is durable, with a
run id made from the parent's and the call's (``PARENT.CALL``), so a crash never starts it
twice: a creator that died before creating it leaves the parent's wait, and the parent's next
drive creates it. When the child ends, a ``child_ended`` record in the parent carries its
status, its answer and what it spent (counted into the parent's budgets); the call then gets
the answer as its result. Creating a child, and telling its parent that it ended, is the
supervisor's (``Supervisor._start_child``, ``_tell_parent``); the parent's drive looks too
(``look_at_children``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from .._errors import RunNotFoundError
from ..journal import Budgets, ChildEnded, Event, RunStarted, ToolResult, Usage, Waiting
from ._manifest import build_manifest
from ._runtime import Runtime
from ._state import RunState, fold

log = logging.getLogger("tether.supervisor")


def child_started(rt: Runtime, parent: RunState, waiting: Waiting, app_version: str) -> RunStarted:
    """The ``run_started`` record of the child run ``waiting`` asks for: the model and tools
    of this process, its budgets what it asked for within what the parent has left."""
    spec = waiting.child
    assert spec is not None
    child_id = str(spec["run_id"])
    system = spec.get("system")
    return RunStarted(
        run_id=child_id,
        manifest=build_manifest(
            rt, system=system if isinstance(system, str | list) else None, app_version=app_version
        ),
        messages=list(spec["messages"]),
        budgets=child_budgets(parent, spec.get("budgets")),
        parent=parent.run_id,
        parent_call=waiting.call_id,
        trace=None if rt.telemetry is None else rt.telemetry.run_context(child_id),
    )


def child_ended(call_id: str, child: RunState) -> ChildEnded | None:
    """The ``child_ended`` record for a child whose journal folded to ``child``, if it ended."""
    if child.finished is None:
        return None
    return ChildEnded(
        call_id=call_id,
        child=child.run_id,
        status=child.finished.status,
        final_text=child.final_text,
        reason=child.finished.reason,
        usage=Usage(
            input_tokens=child.input_tokens,
            output_tokens=child.output_tokens,
            cache_creation_input_tokens=child.cache_creation_tokens,
            cache_read_input_tokens=child.cache_read_tokens,
        ),
        model_calls=child.model_calls + child.child_model_calls,
        tool_calls=child.tool_calls + child.child_tool_calls,
    )


async def look_at_children(
    state: RunState, rt: Runtime, append: Callable[[list[Event]], Awaitable[None]]
) -> bool:
    """For each call waiting for a child run: record its end (``append``) if it has ended, or
    start it if it does not exist (its creator stopped between journaling the wait and
    creating it).

    A child's own supervisor records the end in its parent as soon as the child ends; this
    look covers a process that died in between. Returns whether an end was recorded.
    """
    recorded = False
    for call in list(state.calls.values()):
        wait = call.wait
        if wait is None or wait.child is None:
            continue
        child = str(wait.child["run_id"])
        if child in state.children:
            continue
        try:
            events = await rt.read_run(child)
        except RunNotFoundError:
            await rt.start_child(state, wait)
            continue
        found = fold(events)
        stranger = not_adopted(state.run_id, call.id, child, found)
        if stranger is not None:
            log.warning("run %s: %s", state.run_id, stranger, extra={"run_id": state.run_id})
            await append([ToolResult(call_id=call.id, ok=False, content=stranger)])
            recorded = True
            continue
        ended = child_ended(call.id, found)
        if ended is not None:
            await append([ended])
            recorded = True
    return recorded


def not_adopted(parent: str, call_id: str, child_id: str, child: RunState) -> str | None:
    """Why run ``child_id`` (folded to ``child``) is not the child that call ``call_id`` of run
    ``parent`` started (its ``run_started`` must name both, docs/design.md invariant 13), or
    ``None``.

    A run may have the child's id without being the child: one created by hand, or by a
    journal from before child ids were checked. Its answer is never read as the child's.
    """
    started = child.started
    if started is not None and (started.parent, started.parent_call) == (parent, call_id):
        return None
    named = (
        "names no parent"
        if started is None or not started.parent
        else f"names parent {started.parent!r}, call {started.parent_call!r}"
    )
    return (
        f"the child run {child_id!r} of this call could not be started: a run of that id "
        f"exists that is not this call's child (its run_started {named}); its answer is not "
        "taken"
    )


def child_budgets(parent: RunState, asked: dict[str, Any] | None) -> Budgets:
    """The child's limits: what it asked for, within what its parent has left."""
    budgets = msgspec.convert(asked, Budgets) if asked else Budgets()
    mine = parent.budgets
    changes: dict[str, Any] = {}
    if mine.max_model_calls is not None:
        left = max(0, mine.max_model_calls - parent.model_calls - parent.child_model_calls)
        changes["max_model_calls"] = _least(budgets.max_model_calls, left)
    if mine.max_tool_calls is not None:
        left = max(0, mine.max_tool_calls - parent.tool_calls - parent.child_tool_calls)
        changes["max_tool_calls"] = _least(budgets.max_tool_calls, left)
    if mine.max_tokens is not None:
        changes["max_tokens"] = _least(budgets.max_tokens, max(0, mine.max_tokens - parent.tokens))
    return msgspec.structs.replace(budgets, **changes)


def _least(asked: int | None, left: int) -> int:
    return left if asked is None else min(asked, left)
