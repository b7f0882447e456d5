"""What an event says, in one line: the descriptions ``tether show`` prints and the console shows.

Pure functions of the journal's records; nothing here reads a store or the clock.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, assert_never

import msgspec

from ..journal import (
    AnyEvent,
    ChildEnded,
    Decision,
    Escalated,
    ModelFailed,
    ModelResponse,
    Parked,
    Repinned,
    Resolved,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Signal,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
)
from ..journal import Waiting as WaitRecord
from ..journal._records import FIRST_DRIVE, result_text


def event_type(event: AnyEvent) -> str:
    """The record's tag (``tool_result``...), as the journal names it."""
    return str(type(event).__struct_config__.tag)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis, fit for a terminal
    (``printable``)."""
    flat = printable(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


_BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_SURROGATES = "\ud800-\udfff"
"""What bytes that are not UTF-8 decode to (a shell's argument, a file name): no terminal can
be sent them as they are."""
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI_CONTROLS}{_SURROGATES}]")
_BIDI = re.compile(f"[{_BIDI_CONTROLS}]")


def printable(text: str) -> str:
    """``text`` with every control character but the newline and the tab written out
    (``\\x1b``), and every bidirectional control (``\\u202e``): a model's words, a tool's
    result or a person's note reach an operator's terminal, and an escape sequence there could
    retitle the window, recolour or rewrite what is shown; a right-to-left override could show
    a call's arguments to its approver in another order than the tool gets them. A lone
    surrogate (what bytes that are not UTF-8 decode to) is written out too (``\\udcff``)."""
    return _CONTROL.sub(_written_out, text)


def visible(text: str) -> str:
    """``text`` with its bidirectional controls written out (``\\u202e``), for a page: what
    the console shows a person is in the order the tool and the model get it."""
    return _BIDI.sub(_written_out, text)


def _written_out(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def as_json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def format_time(at: float) -> str:
    """A wall-clock time as ``2026-12-04 09:00:00 UTC``."""
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``4d03h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def call_text(name: str, args: Any, limit: int = 80) -> str:
    """``name(key="value", n=3)``, shortened."""
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={as_json(v)}" for k, v in args.items())
    else:
        inner = "" if args is None else as_json(args)
    return shorten(f"{name}({inner})", limit)


def describe(event: AnyEvent, names: dict[str, str], limit: int = 100) -> str:
    """One line saying what ``event`` records; ``names`` maps call ids to tool names (learnt
    from the ``model_response`` records described so far).

    The one renderer of events: ``tether show``, the console and the test kit's timeline all
    print what this says. Every event type has its case; a new one is a type error here
    (``assert_never``) until it has one.
    """

    def tool(call_id: str) -> str:
        name = names.get(call_id)
        return f"{name} [{call_id}]" if name else f"[{call_id}]"

    match event:
        case RunStarted():
            return shorten(_started(event), limit)
        case ModelResponse():
            return shorten(_answer(event, names), limit)
        case ToolStarted():
            names.setdefault(event.call_id, event.name)
            return f"{tool(event.call_id)} attempt {event.attempt}"
        case ToolResult():
            if event.blob is not None:
                body = f"blob {event.blob.size} bytes: {event.blob.summary}"
            elif event.blocks and isinstance(event.content, list):
                body = _blocks_text(event.content)
            else:
                body = result_text(event.content)
            return shorten(f"{tool(event.call_id)} {'ok' if event.ok else 'error'}: {body}", limit)
        case Decision():
            verb = "approved" if event.approved else "rejected"
            note = f": {event.note}" if event.note else ""
            return shorten(f"{verb} {tool(event.call_id)} by {event.by}{note}", limit)
        case Escalated():
            return shorten(f"{tool(event.call_id)}: {event.reason}", limit)
        case Resolved():
            text = f"{tool(event.call_id)} {event.outcome}"
            if event.by:
                text += f" by {event.by}"
            if event.result is not None:
                text += f", result {as_json(event.result)}"
            if event.note:
                text += f": {event.note}"
            return shorten(text, limit)
        case Resumed():
            return shorten(_resumed(event), limit)
        case Suspended():
            where = f"{event.host or '?'} (pid {event.pid})"
            return shorten(f"suspended by {where}: {event.reason}", limit)
        case ModelFailed():
            text = f"{event.kind}: {event.error}"
            if event.retry_at is not None:
                text += f"; asked again at +{max(0.0, event.retry_at - event.at):.1f}s"
            return shorten(text, limit)
        case ToolFailed():
            what = "ended, outcome unknown" if event.timed_out else "failed"
            if event.unsent:
                what = "not sent (its service could not be reached)"
            text = f"{tool(event.call_id)} attempt {event.attempt} {what}: {event.error}"
            if event.unsent and event.retry_at is not None:
                text += f"; tried again at +{max(0.0, event.retry_at - event.at):.1f}s"
            return shorten(text, limit)
        case Parked():
            return shorten(f"needs_attention ({event.cause}): {event.reason}", limit)
        case WaitRecord():
            return shorten(f"{tool(event.call_id)} {_wait(event)}", limit)
        case Signal():
            by = f" from {event.by}" if event.by else ""
            return shorten(f"{event.name} ({event.signal_id}){by}: {as_json(event.payload)}", limit)
        case ChildEnded():
            text = event.final_text if event.final_text is not None else event.reason
            return shorten(f"child run {event.child} ended {event.status}: {text}", limit)
        case Retried():
            text = "retried" + (f" by {event.by}" if event.by else "")
            if event.budgets is not None:
                text += f", budgets {as_json(msgspec.to_builtins(event.budgets))}"
            if event.note:
                text += f": {event.note}"
            return shorten(text, limit)
        case RunFinished():
            return shorten(event.status + (f": {event.reason}" if event.reason else ""), limit)
        case Repinned():
            parts = [f"{p.name} v{p.version} ({p.schema_hash[:12]})" for p in event.tools]
            if event.model is not None:
                parts.append(f"model {event.model}")
            who = f" by {event.by}" if event.by else ""
            note = f": {event.note}" if event.note else ""
            return shorten(f"now on {', '.join(parts) or 'the same contract'}{who}{note}", limit)
        case _:
            assert_never(event)


def _blocks_text(blocks: list[Any]) -> str:
    """Content blocks as a person reads them: the text of text blocks, others by their type
    (``[image]``)."""
    words = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        text = block.get("text") if isinstance(block, dict) else None
        words.append(text if kind == "text" and isinstance(text, str) else f"[{kind or '?'}]")
    return " ".join(words)


def _started(event: RunStarted) -> str:
    m = event.manifest
    prompt = ""
    if event.messages:
        content = event.messages[-1].get("content")
        prompt = content if isinstance(content, str) else as_json(content)
    text = f"model {m.model}, {len(m.tools)} tool(s)"
    if m.app_version:
        text += f", app {m.app_version}"
    return f"{text}; prompt: {as_json(prompt)}"


def _answer(event: ModelResponse, names: dict[str, str]) -> str:
    content = event.message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    parts: list[str] = []
    if event.stop_reason not in (None, "end_turn", "tool_use"):
        parts.append(f"stopped: {event.stop_reason}")
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_use":
            call_id, name = str(block.get("id", "?")), str(block.get("name", "?"))
            names[call_id] = name
            parts.append(f"asks for {call_text(name, block.get('input'), 60)} [{call_id}]")
        elif kind == "server_tool_use":
            name = str(block.get("name", "?"))
            parts.append(f"server ran {call_text(name, block.get('input'), 60)}")
        elif kind == "text" and block.get("text"):
            parts.append(f"says {as_json(shorten(str(block['text']), 60))}")
    usage = event.usage
    if usage.cache_creation_input_tokens or usage.cache_read_input_tokens:
        parts.append(
            f"cache: {usage.cache_creation_input_tokens} written, "
            f"{usage.cache_read_input_tokens} read"
        )
    if usage.reasoning_tokens:
        parts.append(f"reasoning: {usage.reasoning_tokens} tokens")
    return "; ".join(parts) or "(empty answer)"


def _resumed(event: Resumed) -> str:
    where = f"{event.host or '?'} (pid {event.pid})"
    if event.cause == FIRST_DRIVE:
        return f"first driven on {where}, a process other than its creator"
    taken = f", taken over from {event.taken_from}" if event.taken_from else ""
    if not event.charged:  # a graceful stop, a store outage: not a restart
        return f"resumed on {where} after {event.cause} (not a restart){taken}"
    return f"restart {event.attempt} on {where} after {event.cause}{taken}"


def _wait(event: WaitRecord) -> str:
    if event.child is not None:
        what = f"waits for child run {event.child.get('run_id')}"
    elif event.event is not None:
        what = f"waits for event {event.event}"
    else:
        what = "sleeps"
    if event.until is not None:
        what += f" until {format_time(event.until)}"
    return what
