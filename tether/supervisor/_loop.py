"""The one agent loop: replay the journal, decide the next step from the state, act, record.

A fresh run and a resumed run go through exactly this code (DESIGN invariant 4). Every step
writes its intent before acting and its outcome before the next decision:

- the model's answer (with its tool calls and their ids) is durable before any tool runs;
- a ``tool_started`` record is durable before the tool runs;
- a tool's result is durable before the model is called again.

A tool call that was started but has no result (the process died in between) is *dangling*;
what happens to it is the tool's replay policy (``tether.tools.ReplayPolicy``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from .._errors import ToolArgumentsError, UnknownToolError
from ..journal._records import (
    AnyEvent,
    Decision,
    Escalated,
    Event,
    Manifest,
    ModelResponse,
    Resolved,
    Resumed,
    RunFinished,
    ToolResult,
    ToolStarted,
)
from ..journal._store import RunJournal as Journal
from ..models._base import Model
from ..testing._crashpoints import crashpoint
from ..tools._context import ToolContext
from ..tools._policy import ApprovalTimeout, ReplayPolicy
from ..tools._registry import ToolRegistry
from ..tools._spec import ToolSpec
from ._state import Call, RunState, RunStatus, fold

SYSTEM_ACTOR = "tether"

log = logging.getLogger("tether.supervisor")


@dataclass(frozen=True)
class Outcome:
    """Where a drive left the run: its status, why, and what it waits for."""

    status: RunStatus
    reason: str = ""
    pending: tuple[str, ...] = ()
    wake_at: float | None = None


class Mailbox(Protocol):
    """Where answers wait for a run whose journal another process held (the store's inbox)."""

    async def has_inbox(self, run_id: str) -> bool: ...

    async def take_inbox(self, run_id: str) -> list[AnyEvent]: ...

    async def clear_inbox(self, run_id: str, count: int) -> None: ...


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
    clock: Callable[[], float] = time.time
    host: str = field(default_factory=socket.gethostname)
    mailbox: Mailbox | None = None
    definitions: dict[tuple[tuple[str, str, str], ...], list[dict[str, Any]]] = field(
        default_factory=dict
    )


def build_manifest(
    rt: Runtime, *, system: str | None, app_version: str, tools: list[Any] | None = None
) -> Manifest:
    """The manifest a new run pins: model, parameters, system prompt, tool contracts, app."""
    return Manifest(
        model=rt.model.name,
        model_params=dict(rt.model.params),
        system=system,
        system_hash=_sha256(system or ""),
        tools=rt.tools.pins() if tools is None else tools,
        app_version=app_version,
    )


def manifest_problem(rt: Runtime, manifest: Manifest) -> str | None:
    """What a resumed run pinned that this process cannot honour, or ``None``."""
    if manifest.model != rt.model.name:
        return (
            f"pinned model {manifest.model!r} is not available (this process has {rt.model.name!r})"
        )
    params = msgspec.json.decode(msgspec.json.encode(rt.model.params))
    if manifest.model_params != params:
        return (
            f"model parameters changed: pinned {manifest.model_params!r}, "
            f"this process has {params!r}"
        )
    if manifest.system_hash != _sha256(manifest.system or ""):
        return "the pinned system prompt does not match its hash"
    if rt.strict_app_version and manifest.app_version != rt.app_version:
        return (
            f"pinned app version {manifest.app_version!r} is not this process's "
            f"({rt.app_version!r})"
        )
    for pin in manifest.tools:
        if (pin.name, pin.version) not in rt.tools:
            return f"pinned tool {pin.name!r} version {pin.version!r} is not registered"
        spec = rt.tools.get(pin.name, pin.version)
        if spec.schema_hash != pin.schema_hash:
            return (
                f"tool {pin.name!r} version {pin.version!r} changed its contract "
                f"(schema hash {spec.schema_hash[:12]}, pinned {pin.schema_hash[:12]}); "
                "register the old contract under its version or give the new one a new version"
            )
    return None


def classify(state: RunState, rt: Runtime) -> Outcome:
    """The status the journal alone implies (no budgets, no manifest check)."""
    if state.finished is not None:
        return Outcome(RunStatus(state.finished.status), state.finished.reason)
    if not state.turn_open:
        return Outcome(RunStatus.RUNNING)
    now = rt.clock()
    escalated: list[Call] = []
    waiting: list[Call] = []
    wake_at = run_deadline(state)  # a parked run still fails at its deadline
    for call in state.calls.values():
        if call.done:
            continue
        if call.escalated:
            escalated.append(call)
            continue
        if call.resolution is None and call.decision is None:
            spec = spec_for(state, rt, call.name)
            if spec is not None and spec.approval:
                deadline = _approval_deadline(spec, call)
                if deadline is None or now < deadline:
                    waiting.append(call)
                    if deadline is not None:
                        wake_at = deadline if wake_at is None else min(wake_at, deadline)
                    continue
        return Outcome(RunStatus.RUNNING)
    if escalated:
        reasons = "; ".join(
            f"{c.name} ({c.id}): {c.escalation.reason}" for c in escalated if c.escalation
        )
        return Outcome(
            RunStatus.NEEDS_ATTENTION,
            reasons,
            tuple(c.id for c in escalated + waiting),
            wake_at,
        )
    names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
    return Outcome(
        RunStatus.WAITING_FOR_APPROVAL,
        f"approval needed for {names}",
        tuple(c.id for c in waiting),
        wake_at,
    )


async def drive(
    journal: Journal, rt: Runtime, *, fresh: bool, last_error: str | None = None
) -> Outcome:
    """Advance the run in ``journal`` until it finishes or must wait for a person.

    Returns the resting outcome. The journal stays open; the caller closes it. ``fresh`` says
    the run was just created; otherwise a run found mid-work counts a restart (a ``resumed``
    record), and past the restart budget it fails with ``last_error`` in its reason.

    Raises:
        JournalError: the journal could not be written (the run's task should crash and
            recover by reopening).
        ModelError: the model failed for good.

    On cancellation: stops at the next await; everything recorded so far is durable and the
    run resumes from there.
    """
    blobs: dict[str, Any] = {}
    await _load_blobs(journal, rt, blobs)
    state = fold(journal.events, blobs)
    if state.started is None:
        raise ValueError(f"run {journal.run_id!r} has no run_started record")
    if state.finished is not None:
        return classify(state, rt)
    problem = manifest_problem(rt, state.manifest)
    if problem is not None:
        return Outcome(RunStatus.NEEDS_ATTENTION, problem)
    if not fresh and _was_interrupted(state, rt):
        await _append(journal, state, rt, blobs, [_resumed(state, rt)])
        limit = state.budgets.max_restarts
        limit = rt.max_restarts if limit is None else limit
        if state.restarts > limit:
            reason = f"restart budget exhausted: {state.restarts} restarts (limit {limit})"
            if last_error:
                reason += f"; last error: {last_error}"
            return await _finish(journal, state, rt, blobs, RunStatus.FAILED, reason)
    if not fresh:  # a run created just now has no call an answer could be for yet
        await _fold_inbox(journal, state, rt, blobs)
    prestarted: set[str] = set()  # calls whose tool_started went out with the model's answer
    while True:
        outcome = classify(state, rt)
        if outcome.status is not RunStatus.RUNNING and await _fold_inbox(journal, state, rt, blobs):
            continue  # answers queued while this process held the journal: act on them
        if outcome.status is not RunStatus.RUNNING:
            deadline = run_deadline(state)
            if not outcome.status.final and deadline is not None and rt.clock() >= deadline:
                reason = f"deadline of {state.budgets.deadline_s:g} s passed while {outcome.status}"
                return await _finish(journal, state, rt, blobs, RunStatus.FAILED, reason)
            return outcome
        if state.turn_open:
            await _advance_calls(journal, state, rt, blobs, prestarted)
        else:
            over = _budget_problem(state, rt, for_model=True)
            if over is not None:
                return await _finish(journal, state, rt, blobs, RunStatus.FAILED, over)
            await _call_model(journal, state, rt, blobs, prestarted)


async def _fold_inbox(
    journal: Journal, state: RunState, rt: Runtime, blobs: dict[str, Any]
) -> bool:
    """Record the answers people queued while this process held the journal.

    Looked at when a drive resumes a run and whenever the run is about to rest (not at every
    step, nor when a just-created run starts: a ``stat`` there is measurable), so a queued answer
    takes effect at the run's next pause.
    Returns whether any answer was recorded.
    """
    mailbox = rt.mailbox
    if mailbox is None or not await mailbox.has_inbox(journal.run_id):
        return False
    from ._answers import answer_problem  # the checks import this module

    answers = await mailbox.take_inbox(journal.run_id)
    recorded = False
    for answer in answers:
        problem = answer_problem(state, rt, answer)
        if problem is None:
            await _append(journal, state, rt, blobs, [answer])
            recorded = True
        else:
            log.warning("run %s: ignored a queued answer: %s", journal.run_id, problem)
    crashpoint("inbox_folded")  # a crash here leaves them in both: the check above copes
    await mailbox.clear_inbox(journal.run_id, len(answers))
    return recorded


async def _call_model(
    journal: Journal, state: RunState, rt: Runtime, blobs: dict[str, Any], prestarted: set[str]
) -> None:
    tools = _definitions(rt, state.manifest)
    messages = [dict(m) for m in state.messages]
    if rt.model_gate is not None:
        async with rt.model_gate:
            reply = await rt.model(system=state.manifest.system, messages=messages, tools=tools)
    else:
        reply = await rt.model(system=state.manifest.system, messages=messages, tools=tools)
    crashpoint("model_answered")
    records: list[Event] = [ModelResponse(message=reply.as_message(), usage=reply.usage)]
    uses = [b for b in reply.content if b.get("type") == "tool_use"]
    starts = _starts_with_answer(state, rt, uses)
    if not uses:
        records.append(RunFinished(status=RunStatus.DONE.value))
    await _append(journal, state, rt, blobs, [*records, *starts])
    prestarted.update(s.call_id for s in starts)
    crashpoint("model_saved")


_SAFE_TO_REPEAT = (ReplayPolicy.RERUN, ReplayPolicy.IDEMPOTENCY_KEY)
"""Policies under which running a call again is harmless."""


def _starts_with_answer(
    state: RunState, rt: Runtime, uses: list[dict[str, Any]]
) -> list[ToolStarted]:
    """The ``tool_started`` records to write in the same group as the model's answer.

    That saves one sync per call, and is done only where it changes nothing a person could
    tell: every call of the turn runs at once (a known tool, valid arguments, no approval, within
    budget), and each tool's policy makes running it again harmless (``rerun`` or
    ``idempotency_key``). If the process dies before such a call really ran, the resumed run
    finds it started without a result and runs it under that policy, as after any crash
    between a call's start and its result.
    """
    starts: list[ToolStarted] = []
    for block in uses:
        spec = spec_for(state, rt, block["name"])
        if spec is None or spec.approval or spec.policy not in _SAFE_TO_REPEAT:
            return []
        try:
            spec.validate(block.get("input"))
        except ToolArgumentsError:
            return []
        starts.append(ToolStarted(call_id=block["id"], name=block["name"], attempt=1))
    if len({s.call_id for s in starts}) != len(starts):
        return []  # a malformed turn: let the usual path deal with it
    if starts and _budget_problem(state, rt, for_model=False, starting=len(starts)) is not None:
        return []
    return starts


async def _advance_calls(
    journal: Journal, state: RunState, rt: Runtime, blobs: dict[str, Any], prestarted: set[str]
) -> None:
    """Record what needs no tool run, then run every runnable call of the turn concurrently."""
    now = rt.clock()
    records: list[Event] = []
    runnable: list[tuple[Call, ToolSpec]] = []
    verify: list[tuple[Call, ToolSpec]] = []
    for call in state.calls.values():
        if call.done or call.escalated:
            continue
        spec = spec_for(state, rt, call.name)
        if spec is not None and call.id in prestarted:
            runnable.append((call, spec))  # checked when its start went out with the answer
            continue
        if spec is None:
            records.append(_error(call, f"unknown tool {call.name!r}"))
            continue
        try:
            spec.validate(call.input)
        except ToolArgumentsError as exc:
            records.append(_error(call, f"invalid arguments for {call.name}: {exc.reason}"))
            continue
        if call.resolution is not None:
            res = call.resolution
            if res.outcome == "succeeded":
                records.append(ToolResult(call_id=call.id, ok=True, content=res.result))
                continue
            if res.outcome == "failed":
                note = res.note or f"marked failed by {res.by or 'a person'}"
                content = res.result if res.result is not None else note
                records.append(ToolResult(call_id=call.id, ok=False, content=content))
                continue
            if call.attempts == call.attempts_at_resolution:  # "retry": run it once more
                runnable.append((call, spec))
                continue
            # the retried attempt is dangling too: fall through to the policy
        elif call.decision is not None and not call.decision.approved:
            records.append(_rejected(call, call.decision.by, call.decision.note))
            continue
        elif spec.approval:
            decision = call.decision
            if decision is None:
                deadline = _approval_deadline(spec, call)
                if deadline is None or now < deadline:
                    continue  # waits for a person
                if spec.on_approval_timeout is ApprovalTimeout.ESCALATE:
                    records.append(Escalated(call_id=call.id, reason="approval deadline passed"))
                    continue
                note = f"no decision before the approval deadline ({spec.approval_timeout:g} s)"
                records.append(
                    Decision(call_id=call.id, approved=False, by=SYSTEM_ACTOR, note=note)
                )
                records.append(_rejected(call, SYSTEM_ACTOR, note))
                continue
            if not decision.approved:
                records.append(_rejected(call, decision.by, decision.note))
                continue
        if call.attempts == 0 or (
            call.resolution is not None and call.attempts == call.attempts_at_resolution
        ):
            runnable.append((call, spec))
            continue
        # Dangling: started, no result. The tool's policy decides.
        if spec.policy in _SAFE_TO_REPEAT:
            runnable.append((call, spec))
        elif spec.policy is ReplayPolicy.VERIFY:
            verify.append((call, spec))
        else:
            reason = (
                f"outcome unknown: {call.name} was started (attempt {call.attempts}) "
                "but its result was never recorded; resolve it as succeeded, retry or failed"
            )
            records.append(Escalated(call_id=call.id, reason=reason))
    if records:
        await _append(journal, state, rt, blobs, records)
    if not runnable and not verify:
        return
    starting = sum(1 for call, _ in runnable if call.id not in prestarted)
    over = _budget_problem(state, rt, for_model=False, starting=starting)
    if over is not None:
        await _finish(journal, state, rt, blobs, RunStatus.FAILED, over)
        return
    if len(runnable) + len(verify) == 1:  # the common case: no task group to pay for
        if runnable:
            await _run_call(journal, state, *runnable[0], prestarted)
        else:
            await _verify_call(journal, state, *verify[0], prestarted)
    else:
        async with anyio.create_task_group() as tg:
            for call, spec in runnable:
                tg.start_soon(_run_call, journal, state, call, spec, prestarted)
            for call, spec in verify:
                tg.start_soon(_verify_call, journal, state, call, spec, prestarted)
    await _catch_up(journal, state, rt, blobs)


async def _run_call(
    journal: Journal, state: RunState, call: Call, spec: ToolSpec, prestarted: set[str]
) -> None:
    if call.id in prestarted:  # its tool_started is durable already, and it has not run
        prestarted.discard(call.id)
        attempt = call.attempts
    else:
        attempt = call.attempts + 1
        await journal.append([ToolStarted(call_id=call.id, name=call.name, attempt=attempt)])
    crashpoint("tool_started")
    await journal.fence()  # a worker paused past its lease must not act for the run any more
    ctx = ToolContext(run_id=journal.run_id, call_id=call.id, attempt=attempt)
    try:
        content = await spec.invoke(call.input, ctx)
        result = ToolResult(call_id=call.id, ok=True, content=content)
    except Exception as exc:  # the model hears what went wrong, as an error result
        result = ToolResult(call_id=call.id, ok=False, content=f"{type(exc).__name__}: {exc}")
    crashpoint("tool_returned")
    await journal.append([result])
    crashpoint("result_saved")


async def _verify_call(
    journal: Journal, state: RunState, call: Call, spec: ToolSpec, prestarted: set[str]
) -> None:
    await journal.fence()
    ctx = ToolContext(run_id=journal.run_id, call_id=call.id, attempt=call.attempts)
    landed = await spec.check_landed(call.input, ctx)
    if landed is not None:
        await journal.append([ToolResult(call_id=call.id, ok=True, content=landed)])
        crashpoint("result_saved")
        return
    await _run_call(journal, state, call, spec, prestarted)


async def _append(
    journal: Journal, state: RunState, rt: Runtime, blobs: dict[str, Any], records: list[Event]
) -> None:
    await journal.append(records)
    await _catch_up(journal, state, rt, blobs)


async def _catch_up(journal: Journal, state: RunState, rt: Runtime, blobs: dict[str, Any]) -> None:
    """Fold new durable events, with the content of any blob they refer to.

    Only the events not folded yet are looked at, so a step costs the same in a long run.
    """
    await _load_blobs(journal, rt, blobs, state.applied)
    state.catch_up(journal.events, blobs)


async def _finish(
    journal: Journal,
    state: RunState,
    rt: Runtime,
    blobs: dict[str, Any],
    status: RunStatus,
    reason: str,
) -> Outcome:
    await _append(journal, state, rt, blobs, [RunFinished(status=status.value, reason=reason)])
    return Outcome(status, reason)


def _definitions(rt: Runtime, manifest: Manifest) -> list[dict[str, Any]]:
    """The tool definitions a run pinned, built once per pinned set (not per model call)."""
    if not manifest.tools:
        return []
    key = tuple((p.name, p.version, p.schema_hash) for p in manifest.tools)
    cached = rt.definitions.get(key)
    if cached is None:
        cached = rt.definitions[key] = rt.tools.definitions(manifest.tools)
    return list(cached)


async def _load_blobs(journal: Journal, rt: Runtime, blobs: dict[str, Any], start: int = 0) -> None:
    """Load every blob the journal's events from ``start`` on refer to that ``blobs`` lacks."""
    events = journal.events
    for event in events[start:] if start else events:
        ref = event.blob if isinstance(event, ToolResult) else None
        if ref is not None and ref.digest not in blobs:
            blobs[ref.digest] = await rt.load_blob(ref)


def spec_for(state: RunState, rt: Runtime, name: str) -> ToolSpec | None:
    for pin in state.manifest.tools:
        if pin.name == name:
            try:
                return rt.tools.get(pin.name, pin.version)
            except UnknownToolError:
                return None
    return None


def run_deadline(state: RunState) -> float | None:
    """When the run's ``deadline_s`` budget runs out (wall clock), if it has one."""
    if state.started is None or state.budgets.deadline_s is None:
        return None
    return state.started.at + state.budgets.deadline_s


def _approval_deadline(spec: ToolSpec, call: Call) -> float | None:
    if spec.approval_timeout is None:
        return None
    return call.started_at + spec.approval_timeout


def _budget_problem(
    state: RunState, rt: Runtime, *, for_model: bool, starting: int = 0
) -> str | None:
    b = state.budgets
    started = state.started
    assert started is not None
    if b.deadline_s is not None and rt.clock() > started.at + b.deadline_s:
        return f"deadline of {b.deadline_s:g} s passed"
    if for_model:
        if b.max_model_calls is not None and state.model_calls >= b.max_model_calls:
            return f"model call budget exhausted: {state.model_calls} of {b.max_model_calls}"
        if b.max_tokens is not None and state.tokens >= b.max_tokens:
            return f"token budget exhausted: {state.tokens} of {b.max_tokens}"
    elif b.max_tool_calls is not None and state.tool_calls + starting > b.max_tool_calls:
        return (
            f"tool call budget exhausted: {state.tool_calls} made, {starting} more needed, "
            f"limit {b.max_tool_calls}"
        )
    return None


def _was_interrupted(state: RunState, rt: Runtime) -> bool:
    """Whether the last owner stopped mid-work (a restart), not at a rest or a person's answer."""
    if isinstance(state.last, (Decision, Resolved)):
        return False
    open_calls = [c for c in state.calls.values() if not c.done]
    if open_calls and all(_awaits_approval(state, rt, c) for c in open_calls):
        return False  # parked for a person, woken by its approval deadline
    return classify(state, rt).status is RunStatus.RUNNING


def _awaits_approval(state: RunState, rt: Runtime, call: Call) -> bool:
    spec = spec_for(state, rt, call.name)
    return (
        spec is not None
        and spec.approval
        and call.attempts == 0
        and call.decision is None
        and call.escalation is None
    )


def _resumed(state: RunState, rt: Runtime) -> Resumed:
    return Resumed(attempt=state.restarts + 1, host=rt.host, pid=os.getpid())


def _error(call: Call, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, ok=False, content=message)


def _rejected(call: Call, by: str, note: str) -> ToolResult:
    text = f"{call.name} was rejected by {by}" + (f": {note}" if note else "")
    return ToolResult(call_id=call.id, ok=False, content=text)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
