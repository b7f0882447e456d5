"""A person's answer, checked and recorded: approve, reject, resolve, retry, signal, cancel.

One implementation for every front end that is not a running supervisor: ``tether approve``
and the other operator commands, and the web console. Each verb builds one record and hands it
to ``record_answer`` (the supervisor's own), which checks it against the run as its journal
stands (``answer_problem``) and appends it under the run's write lock (a directory store: the
journal's ``flock``; PostgreSQL: a lease on the run). When another process holds the run, the
answer is checked against what the run says so far and queued in the run's inbox instead: the
holder records it at its next pause, checking it again, so an answer delivered twice counts
once.

The run itself continues when a supervisor next picks it up: a running ``tether worker``, or
the next process that enters a ``Supervisor`` on the store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from ..journal._protocols import Store
from ..journal._records import Budgets, Decision, Event, Resolved, Retried, RunFinished, Signal
from ..supervisor._answers import Recorded, record_answer
from ..supervisor._state import RunState, RunStatus
from ..tools._waits import wait_for

Outcome = Literal["succeeded", "retry", "failed"]
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "retry", "failed")
EXTENDABLE = ("max_model_calls", "max_tool_calls", "max_tokens", "deadline_s")


async def decide(
    store: Store, run_id: str, call_id: str, *, approved: bool, by: str, note: str = ""
) -> Recorded:
    """Approve (``approved``) or reject call ``call_id`` of run ``run_id``, as ``by``.

    A rejection's ``note`` is what the model reads. Refused after the call's approval deadline
    (the deadline's outcome stands). Raises as ``record_answer``.
    """
    record = Decision(call_id=call_id, approved=approved, by=by, note=note)
    return await record_answer(store, run_id, lambda _: record)


async def resolve(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    outcome: Outcome,
    result: Any = None,
    by: str,
    note: str = "",
) -> Recorded:
    """Answer escalated call ``call_id``: it ``succeeded`` (``result`` is its result), run it
    again (``retry``), or it ``failed`` (the model gets ``result``, else the note).

    Raises:
        ValueError: an unknown outcome, or a ``result`` with ``retry``.
        RunStateError, ...: as ``record_answer``.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be succeeded, retry or failed, not {outcome!r}")
    if outcome == "retry" and result is not None:
        raise ValueError("a result does not apply to the outcome retry")
    record = Resolved(call_id=call_id, outcome=outcome, result=result, by=by, note=note)
    return await record_answer(store, run_id, lambda _: record)


async def retry(
    store: Store,
    run_id: str,
    *,
    by: str,
    note: str = "",
    extend: Iterable[tuple[str, float]] = (),
) -> Recorded:
    """Send on a run the runtime parked, or re-open a failed one, as ``by``.

    ``extend`` raises budgets by an amount each (``("max_model_calls", 20)``); a run that
    would fail again at once is refused.

    Raises:
        ValueError: a limit in ``extend`` that is not a budget, or an amount not above 0.
        RunStateError, ...: as ``record_answer``.
    """
    extensions = [check_extension(name, amount) for name, amount in extend]

    def build(state: RunState) -> Event:
        return Retried(by=by, note=note, budgets=extended(state.budgets, extensions))

    return await record_answer(store, run_id, build)


async def signal(
    store: Store,
    run_id: str,
    name: str,
    payload: Any = None,
    *,
    signal_id: str | None = None,
    by: str = "",
) -> Recorded:
    """Deliver event ``name`` with ``payload`` to run ``run_id``.

    A signal whose ``signal_id`` the run already has counts once; by default each delivery
    gets a new id.

    Raises:
        ValueError: ``name`` is not an event name.
        RunStateError, ...: as ``record_answer`` (a finished run refuses signals).
    """
    wait_for(name)  # checks the name
    record = Signal(name=name, signal_id=signal_id or uuid.uuid4().hex, payload=payload, by=by)
    return await record_answer(store, run_id, lambda _: record)


async def cancel(store: Store, run_id: str, *, reason: str = "cancelled") -> Recorded:
    """End run ``run_id`` as ``cancelled`` with ``reason``.

    Raises as ``record_answer`` (a finished run is refused).
    """
    record = RunFinished(status=RunStatus.CANCELLED.value, reason=reason)
    return await record_answer(store, run_id, lambda _: record)


def check_extension(name: str, amount: float) -> tuple[str, float]:
    """``(name, amount)`` if ``name`` is a budget and ``amount`` raises it.

    Raises:
        ValueError: saying what is wrong.
    """
    if name not in EXTENDABLE:
        raise ValueError(f"{name!r} is not a budget; extend one of {', '.join(EXTENDABLE)}")
    if not amount > 0:
        raise ValueError(f"an extension must be more than 0, got {name}={amount}")
    return name, amount


def extended(budgets: Budgets, extensions: list[tuple[str, float]]) -> Budgets | None:
    """``budgets`` with each named limit raised by its amount (an unlimited one stays so);
    ``None`` when there is nothing to extend."""
    if not extensions:
        return None
    changes: dict[str, Any] = {}
    for name, amount in extensions:
        current = changes.get(name, getattr(budgets, name))
        if current is not None:
            changes[name] = current + amount
    return msgspec.structs.replace(budgets, **changes)
