"""What the console shows, as plain data: one shape for the pages and the JSON API.

Everything here is computed from run summaries and journal records (``tether.operate``); the
pages render these dicts through autoescaping templates, the API returns them as JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..journal import AnyEvent, ModelResponse, RunStarted, ToolResult
from ..operate import Question, RunSummary, as_tree, describe
from ..operate._deploy import offers
from ..operate._display import (
    as_json,
    by_status,
    event_type,
    format_age,
    format_time,
    has_children,
    shorten,
)
from ..supervisor import RunState, RunStatus
from ..supervisor._contracts import Contracts
from ..supervisor._status import run_deadline, world_wait

if TYPE_CHECKING:
    from ..supervisor._state import Call

STATUSES = [s.value for s in RunStatus]
FOLD_AT = 160  # a record longer than this (as JSON) is shown folded
LINE = 300  # the length of an event's one-line description on a run's page


def when(at: float | None) -> str:
    return format_time(at) if at else "-"


def run_row(s: RunSummary, now: float) -> dict[str, Any]:
    """One run as the runs page and ``GET /api/runs`` show it."""
    return {
        "run_id": s.run_id,
        "status": s.status,
        "age": format_age(s.age(now)),
        "age_s": s.age(now),
        "started_at": s.started_at,
        "finished_at": s.finished_at,
        "last_event_at": s.last_at,
        "model_calls": s.model_calls,
        "tool_calls": s.tool_calls,
        "restarts": s.restarts,
        "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens,
        "cache_creation_tokens": s.cache_creation_tokens,
        "cache_read_tokens": s.cache_read_tokens,
        "tokens": s.input_tokens + s.output_tokens + s.cache_creation_tokens + s.cache_read_tokens,
        "detail": s.detail(),
        "reason": s.reason,
        "waiting": [{**w.as_dict(), "deadline": w.deadline} for w in s.questions]
        + [r.as_dict() for r in s.rests],
        "queued": list(s.queued),
        "retrying": s.retrying,
        "action": s.action,
        "model": s.model,
        "tools": dict(s.tools),
        "held_by": s.held_by,
        "parent": s.parent,
        "readable": s.readable,
        "final_text": s.final_text,
        "events": s.events,
    }


@dataclass(frozen=True)
class Page:
    """One page of the runs list, with the counts per status of every run."""

    rows: list[dict[str, Any]]
    counts: dict[str, int]
    total: int
    matching: int
    page: int
    pages: int
    per_page: int
    depths: list[int]
    """How far under its parent each row is (0: not listed under another)."""


def runs_page(
    summaries: list[RunSummary],
    now: float,
    *,
    status: str | None = None,
    query: str = "",
    page: int = 1,
    per_page: int = 50,
    groups: Mapping[str, list[RunSummary]] | None = None,
) -> Page:
    """The runs with ``status`` whose id contains ``query``, page ``page`` of them.

    ``groups``: ``summaries`` by status (``Listing.by_status``), if kept beside them: the
    counts and a status's runs then cost no pass over every run.
    """
    if groups is None:
        groups = by_status(summaries)
    counts = {st: len(groups.get(st, ())) for st in STATUSES}
    pool = summaries if status is None else groups.get(status, [])
    chosen = [s for s in pool if query in s.run_id] if query else pool
    pages = max(1, math.ceil(len(chosen) / per_page))
    page = min(max(1, page), pages)
    # Each child run right under its parent (when both are chosen), as `tether runs` lists them.
    window = slice((page - 1) * per_page, page * per_page)
    # Without child runs, as given: only the page's rows are made.
    tree = has_children(chosen)
    shown = as_tree(chosen)[window] if tree else [(0, s) for s in chosen[window]]
    return Page(
        rows=[run_row(s, now) for _, s in shown],
        depths=[depth for depth, _ in shown],
        counts=counts,
        total=len(summaries),
        matching=len(chosen),
        page=page,
        pages=pages,
        per_page=per_page,
    )


def _context(state: RunState) -> dict[str, str]:
    """What the run is about: its prompt and the model's words in the turn that asks."""
    prompt = ""
    if state.started is not None and state.started.messages:
        content = state.started.messages[-1].get("content")
        prompt = content if isinstance(content, str) else as_json(content)
    said = ""
    for message in reversed(state.messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            said = " ".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
            break
    return {"prompt": shorten(prompt, 600), "model_said": shorten(said, 600)}


@dataclass(frozen=True)
class InboxPage:
    """One page of the inbox: its share of each list (calls, then parked runs, then calls
    waiting for an event, ``per_page`` items in all), and how many each list holds in all."""

    calls: list[dict[str, Any]]
    parked: list[dict[str, Any]]
    events: list[dict[str, Any]]
    counts: dict[str, int]
    page: int
    pages: int
    per_page: int


@dataclass(frozen=True, slots=True)
class _Waits:
    """What waits for a person in one run, before any of it is made into an item."""

    summary: RunSummary
    state: RunState
    questions: tuple[Question, ...]  # approvals and escalated calls
    events: tuple[tuple[Call, str], ...]  # calls waiting for an event, and what they wait


def _waits(summaries: list[RunSummary], now: float) -> list[_Waits]:
    out = []
    for s in summaries:
        state = s.state
        if state is None or s.finished or state.started is None:
            continue
        events = []
        for call in state.calls.values():
            wait = call.wait
            if call.done or wait is None or wait.event is None:
                continue
            rest = world_wait(state, call, now)
            if rest is not None:
                events.append((call, rest[0]))
        if s.questions or state.parked is not None or events:
            out.append(_Waits(s, state, s.questions, tuple(events)))
    return out


def _base(w: _Waits) -> dict[str, Any]:
    return {
        "run_id": w.summary.run_id,
        "status": w.summary.status,
        "run_deadline": run_deadline(w.state),
    }


def _call_item(w: _Waits, question: Question) -> dict[str, Any]:
    call = w.state.calls[question.call_id]
    return {
        **_base(w),
        **_context(w.state),
        "call_id": question.call_id,
        "tool": question.tool,
        "awaiting": question.kind,
        "arguments": call.input,
        "arguments_json": pretty(call.input),
        "since": question.since,
        "deadline": question.deadline,
        "reason": question.reason,
    }


def _parked_item(w: _Waits, fleet: dict[str, Contracts]) -> dict[str, Any]:
    parked = w.state.parked
    assert parked is not None
    return {
        **_base(w),
        **_context(w.state),
        "reason": parked.reason,
        "action": w.summary.action,
        "since": parked.at,
        "offers": offers(w.state, fleet),
    }


def _event_item(w: _Waits, call: Call, what: str) -> dict[str, Any]:
    wait = call.wait
    assert wait is not None
    return {
        **_base(w),
        "call_id": call.id,
        "tool": call.name,
        "event": wait.event,
        "until": wait.until,
        "what": what,
    }


def _lists(
    summaries: list[RunSummary], now: float
) -> tuple[list[tuple[_Waits, Question]], list[_Waits], list[tuple[_Waits, Call, str]]]:
    """The inbox's three lists in their order, each item not made yet."""
    waits = _waits(summaries, now)
    calls = [(w, question) for w in waits for question in w.questions]
    calls.sort(key=lambda c: (c[1].deadline is None, c[1].deadline or 0.0, c[1].since))
    parked = [w for w in waits if w.state.parked is not None]
    events = [(w, call, what) for w in waits for call, what in w.events]
    return calls, parked, events


def inbox(
    summaries: list[RunSummary], now: float, fleet: dict[str, Contracts] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Everything that waits for a person, across all runs.

    ``calls``: approvals and escalated calls (``awaiting`` says which), the nearest deadline
    first; ``parked``: runs the runtime parked (a retry sends them on); ``events``: calls
    waiting for a named event (a signal answers them).
    """
    calls, parked, events = _lists(summaries, now)
    return {
        "calls": [_call_item(w, question) for w, question in calls],
        "parked": [_parked_item(w, fleet or {}) for w in parked],
        "events": [_event_item(w, call, what) for w, call, what in events],
    }


def inbox_page(
    summaries: list[RunSummary],
    now: float,
    fleet: dict[str, Contracts] | None = None,
    *,
    page: int = 1,
    per_page: int = 50,
) -> InboxPage:
    """Page ``page`` of ``inbox``: its lists one after the other, ``per_page`` items a page.
    Only the page's items are made (an inbox of thousands costs what a page of it shows)."""
    calls, parked, events = _lists(summaries, now)
    total = len(calls) + len(parked) + len(events)
    pages = max(1, math.ceil(total / per_page))
    page = min(max(1, page), pages)
    start = (page - 1) * per_page
    end = start + per_page
    # Each list's share of the window [start, end) over the three lists one after the other.
    first, second = len(calls), len(calls) + len(parked)
    return InboxPage(
        calls=[_call_item(w, question) for w, question in calls[start:end]],
        parked=[
            _parked_item(w, fleet or {})
            for w in parked[max(0, start - first) : max(0, end - first)]
        ],
        events=[
            _event_item(w, call, what)
            for w, call, what in events[max(0, start - second) : max(0, end - second)]
        ],
        counts={"calls": len(calls), "parked": len(parked), "events": len(events)},
        page=page,
        pages=pages,
        per_page=per_page,
    )


def pretty(value: Any) -> str:
    """``value`` as indented JSON (what the pages show folded)."""
    try:
        return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def timeline(events: list[AnyEvent]) -> list[dict[str, Any]]:
    """A run's events as ``tether show`` describes them, each with its full record."""
    names: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for event in events:
        raw = msgspec.to_builtins(event)
        full = pretty(raw)
        blob = event.blob if isinstance(event, ToolResult) else None
        rows.append(
            {
                "seq": event.seq,
                "at": event.at,
                "time": when(event.at),
                "type": event_type(event),
                "text": describe(event, names, LINE),
                "record": raw,
                "record_json": full,
                "folded": len(full) > FOLD_AT or isinstance(event, (RunStarted, ModelResponse)),
                "blob": None
                if blob is None
                else {"digest": blob.digest, "size": blob.size, "summary": blob.summary},
            }
        )
    return rows
