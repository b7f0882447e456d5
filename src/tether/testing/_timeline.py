"""A run's journal told as it is written: one line per event, for a person watching.

``Timeline`` turns journal events into lines such as::

    seq 9   tool_started    reply_to_customer [toolu_03] attempt 1

remembering what it has shown, so that each call prints only what is new. ``Narrator`` is what
a child started with ``--timeline`` uses to print the events its process writes: what it loaded
from the journal, then, at every crash point it passes and once more when its run rests, the
events made durable since. The runtime's failpoints are the moments to look because each one
follows a write (or precedes a side effect), so a tool's own output lands between the record
that started it and the record of its result, in the order it happened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from ..journal import AnyEvent, ToolStarted, verify_file
from ..operate import describe

_WIDTH = 90


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
        """A short description of ``event``: what ``tether show`` says of it
        (``tether.operate.describe``, the one renderer of events)."""
        return describe(event, self.names, _WIDTH)


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
