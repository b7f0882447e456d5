"""A run's journal told as it is written: one line per event, for a person watching.

``Timeline`` turns journal events into lines such as::

    seq 9   tool_started    reply_to_customer (toolu_03), attempt 1

remembering what it has shown, so that each call prints only what is new. ``Narrator`` is what
a child started with ``--timeline`` uses to print the events its process writes: what it loaded
from the journal, then, at every crash point it passes and once more when its run rests, the
events made durable since. The runtime's failpoints are the moments to look because each one
follows a write (or precedes a side effect), so a tool's own output lands between the record
that started it and the record of its result, in the order it happened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, final

from ..journal import (
    AnyEvent,
    Decision,
    Escalated,
    ModelFailed,
    ModelResponse,
    Parked,
    Resolved,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
    verify_file,
)

_WIDTH = 72


def _short(text: str, width: int = _WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _call_text(name: str, args: Any) -> str:
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    else:
        inner = json.dumps(args, ensure_ascii=False)
    return f"{name}({inner})"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def tag(event: AnyEvent) -> str:
    """The event's record type, as the journal names it (``tool_started``)."""
    return str(type(event).__struct_config__.tag)


class Timeline:
    """Turns journal events into one-line descriptions, remembering what it already showed.

    Attributes:
        shown: the ``seq`` of the last event shown (-1 before any).
        names: tool names by call id, learnt from the events described so far.
    """

    def __init__(self) -> None:
        self.shown = -1
        self.names: dict[str, str] = {}

    def skip_to(self, events: list[AnyEvent]) -> None:
        """Treat ``events`` as already shown (their tool names are still learnt)."""
        for event in events:
            self.describe(event)
        if events:
            self.shown = events[-1].seq

    def new_lines(self, events: list[AnyEvent]) -> list[str]:
        """One ``  seq N  type  description`` line per event not shown yet."""
        lines = []
        for event in events:
            text = self.describe(event)
            if event.seq > self.shown:
                lines.append(self.line(event, text))
                self.shown = event.seq
        return lines

    @staticmethod
    def line(event: AnyEvent, text: str) -> str:
        """The timeline's line for ``event`` described as ``text``."""
        return f"  seq {event.seq:<3} {tag(event):<15} {text}"

    def describe(self, event: AnyEvent) -> str:
        """A short, human description of ``event``."""
        if isinstance(event, RunStarted):
            last = event.messages[-1] if event.messages else {}
            content = last.get("content", "")
            return _short(f"{last.get('role', 'user')}: {_content_text(content)}")
        if isinstance(event, ModelResponse):
            blocks = event.message.get("content") or []
            calls = [b for b in blocks if b.get("type") == "tool_use"]
            for b in calls:
                self.names[b["id"]] = b["name"]
            if calls:
                asks = "; ".join(_call_text(b["name"], b.get("input")) for b in calls)
                return _short(f"model asks for {asks}")
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            return _short(f"model: {text}")
        if isinstance(event, ToolStarted):
            self.names.setdefault(event.call_id, event.name)
            return f"{event.name or event.call_id} ({event.call_id}), attempt {event.attempt}"
        if isinstance(event, ToolResult):
            name = self.names.get(event.call_id, event.call_id)
            body = event.blob.summary if event.blob is not None else _content_text(event.content)
            mark = "->" if event.ok else "-> error:"
            return _short(f"{name} {mark} {body}")
        if isinstance(event, Decision):
            verb = "approved" if event.approved else "rejected"
            note = f': "{event.note}"' if event.note else ""
            name = self.names.get(event.call_id, "")
            return f"{name} ({event.call_id}) {verb} by {event.by}{note}".lstrip()
        if isinstance(event, Resumed):
            return f"restart {event.attempt}: a new process took the run over"
        if isinstance(event, RunFinished):
            return event.status + (f": {event.reason}" if event.reason else "")
        if isinstance(event, Escalated):
            return _short(f"{event.call_id} needs a person: {event.reason}")
        if isinstance(event, Resolved):
            return f"{event.call_id} resolved as {event.outcome} by {event.by}"
        if isinstance(event, Suspended):
            return "the process stopped on purpose; the next one resumes the run"
        if isinstance(event, (ModelFailed, ToolFailed)):
            return _short(f"{event.error}")
        if isinstance(event, Parked):
            return _short(f"needs a person: {event.reason}")
        if isinstance(event, Retried):
            return f"sent on by {event.by}"
        return ""  # pragma: no cover - every event type is handled above


@final
class Narrator:
    """Prints the journal events one process writes, as a child's ``--timeline`` asks.

    Use it as the failpoint hook (after the crash-point killer, so that a kill at a point
    leaves the events saved just before it for the parent to mark as such), and call
    ``show()`` once more when the run rests.

    Args:
        path: the run's journal file, read without its lock: the process only looks at a
            failpoint, where none of its own writes to the run is in flight.
        say: prints one line (flushed, so the parent has it even if a kill follows).
    """

    def __init__(self, path: str, say: Callable[[str], None]) -> None:
        self._path = path
        self._say = say
        self._timeline = Timeline()

    def loaded(self, events: list[AnyEvent]) -> None:
        """Say what a resuming process found in the journal; those events are not shown."""
        self._timeline.skip_to(events)
        if not events:
            return
        last = events[-1]
        dangling = " (no result yet: the call dangles)" if isinstance(last, ToolStarted) else ""
        self._say(
            f"loaded the journal: seq 0-{last.seq}, last event: {tag(last)} "
            f"{self._timeline.describe(last)}{dangling}"
        )

    def show(self) -> None:
        """Print the events made durable since the last call."""
        try:
            events = verify_file(self._path).events
        except FileNotFoundError:
            return  # the run is not created yet
        for line in self._timeline.new_lines(list(events)):
            self._say(line)

    def __call__(self, point: str) -> None:
        self.show()
