"""The demos' timeline printer: a case's processes told as the journal events they write.

The crash-test harness drives a demo (``tether.testing._drive``) and tells this printer what
happens. Each child runs with ``--timeline``, so its own output already holds the journal events
it wrote (``seq 9  tool_started  reply_to_customer ...``) between the lines its services print.
The printer frames that output: a header per process, the events a killed process had saved
just before its kill (it could not print them), what the kill interrupted, the model calls each
process made, and the person's decisions recorded while no process ran the run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import final

from ..journal import AnyEvent, Decision, Resolved, ToolResult, ToolStarted
from ..testing import Kill
from ..testing._harness import STATUS_MARK, ProcessResult, Timeline

CRASH_MEANING: dict[str, str] = {
    "model_answered": "after the model answered, before its answer was saved",
    "model_saved": "right after the model's answer was saved",
    "tool_started": "after the start of {tool} was saved, before it ran",
    "tool_returned": "right after {tool} returned (its side effect done), "
    "before its result was saved",
    "result_saved": "right after the result of {tool} was saved",
    "parked": "after the run parked and closed its journal",
    "inbox_folded": "after the answers in the run's inbox were saved, before the inbox was cleared",
    "contract_taken": "after the run took a changed contract over, before its next step",
}
"""What a kill at each crash point interrupts; ``{tool}`` is the tool call it hit."""

_SEQ_LINE = re.compile(r"^\s+seq (\d+)\s")


def crash_story(point: str, events: list[AnyEvent]) -> str:
    """What the kill at ``point`` interrupted, naming the tool call it hit."""
    timeline = Timeline()
    tool = "a tool"
    for event in events:
        timeline.describe(event)
        if isinstance(event, (ToolStarted, ToolResult)):
            tool = timeline.names.get(event.call_id, event.call_id)
    return CRASH_MEANING[point].format(tool=tool)


def _calls(n: int) -> str:
    return f"{n} model call{'s' if n != 1 else ''}"


@final
class TimelinePrinter:
    """A ``Watcher`` of ``drive`` that prints a demo's timeline through ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say

    def starting(self, number: int, step: str, kill: Kill | None, events: list[AnyEvent]) -> None:
        title = "start the run" if step == "start" else "a fresh process resumes unfinished runs"
        if kill is not None:
            title += f" (armed: TETHER_CRASH_AT={kill.point}:{kill.n})"
        self._say(f"== Process {number}: {title} ==")

    def ended(self, process: ProcessResult, events: list[AnyEvent]) -> None:
        shown = -1
        for line in process.stdout.splitlines():
            if line.startswith(STATUS_MARK):
                continue
            self._say(line)
            if m := _SEQ_LINE.match(line):
                shown = max(shown, int(m.group(1)))
        calls = _calls(process.model_calls)
        if process.kill is not None and process.killed:
            timeline = Timeline()
            timeline.skip_to([e for e in events if e.seq <= shown])
            for line in timeline.new_lines([e for e in events if e.seq > shown]):
                self._say(line + "   (saved just before the kill)")
            self._say(
                f"CRASH: SIGKILL (exit code {process.returncode}) "
                f"{crash_story(process.kill.point, events)}; process {process.number} "
                f"made {calls}"
            )
        elif process.kill is None and process.returncode == 0:
            self._say(f"process {process.number} exited with code 0 after {calls}")
        else:
            return  # not as armed: the drive reports it
        self._say("")

    def answered(self, records: list[AnyEvent], events: list[AnyEvent]) -> None:
        timeline = Timeline()
        timeline.skip_to([e for e in events if e.seq < records[0].seq])
        for event in records:
            if not isinstance(event, (Decision, Resolved)):
                continue
            tool = timeline.names.get(event.call_id, event.call_id)
            if isinstance(event, Decision):
                verb = "approves" if event.approved else "rejects"
                what = f"{verb} {tool} ({event.call_id})"
            else:
                what = f"resolves {tool} ({event.call_id}) as {event.outcome}"
            self._say(f"== {event.by} {what}; no process runs the run ==")
            self._say(timeline.line(event, timeline.describe(event)))
        self._say("")
