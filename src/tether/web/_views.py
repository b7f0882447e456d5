"""What the console shows, as plain data: one shape for the pages and the JSON API.

Everything here is computed from run summaries and journal records (``tether.operate``); the
pages render these dicts through autoescaping templates, the API returns them as JSON.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec

from ..journal import AnyEvent, ModelResponse, RunStarted, ToolResult
from ..operate import RunSummary, as_tree, describe
from ..operate._deploy import offers
from ..operate._display import as_json, event_type, format_age, format_time, has_children, shorten
from ..supervisor import RunState, RunStatus
from ..supervisor._contracts import Contracts
from ..supervisor._status import run_deadline, world_wait

STATUSES = [s.value for s in RunStatus]
_STATUS = attrgetter("status")
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
) -> Page:
    """The runs with ``status`` whose id contains ``query``, page ``page`` of them."""
    counts = Counter(map(_STATUS, summaries))
    if status is None and not query:
        chosen = summaries  # every run: nothing to choose
    else:
        chosen = [
            s
            for s in summaries
            if (status is None or s.status == status) and (not query or query in s.run_id)
        ]
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
        counts={st: counts.get(st, 0) for st in STATUSES},
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


def inbox(
    summaries: list[RunSummary], now: float, fleet: dict[str, Contracts] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Everything that waits for a person, across all runs.

    ``calls``: approvals and escalated calls (``awaiting`` says which); ``parked``: runs the
    runtime parked (a retry sends them on); ``events``: calls waiting for a named event (a
    signal answers them).
    """
    calls: list[dict[str, Any]] = []
    parked: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for s in summaries:
        state = s.state
        if state is None or s.finished or state.started is None:
            continue
        context = _context(state)
        base = {"run_id": s.run_id, "status": s.status, "run_deadline": run_deadline(state)}
        for w in s.questions:
            call = state.calls[w.call_id]
            calls.append(
                {
                    **base,
                    **context,
                    "call_id": w.call_id,
                    "tool": w.tool,
                    "awaiting": w.kind,
                    "arguments": call.input,
                    "arguments_json": pretty(call.input),
                    "since": w.since,
                    "deadline": w.deadline,
                    "reason": w.reason,
                }
            )
        if state.parked is not None:
            parked.append(
                {
                    **base,
                    **context,
                    "reason": state.parked.reason,
                    "action": s.action,
                    "since": state.parked.at,
                    "offers": offers(state, fleet or {}),
                }
            )
        for call in state.calls.values():
            wait = call.wait
            if call.done or wait is None or wait.event is None:
                continue
            rest = world_wait(state, call, now)
            if rest is None:
                continue
            events.append(
                {
                    **base,
                    "call_id": call.id,
                    "tool": call.name,
                    "event": wait.event,
                    "until": wait.until,
                    "what": rest[0],
                }
            )
    calls.sort(key=lambda c: (c["deadline"] is None, c["deadline"] or 0.0, c["since"]))
    return {"calls": calls, "parked": parked, "events": events}


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
