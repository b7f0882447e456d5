"""Stamping events for any store: each gets its ``seq`` and ``at``, and its encoding is checked.

A store dates an event it is given without an ``at`` with the real time. A writer that keeps
its own clock (the supervisor's, which a test may make virtual) dates its events first, so the
journal says the time that writer's deadlines are reckoned in.

``queueable`` applies the same check to an answer queued for later (an inbox), before it is
acknowledged: one that the journal would refuse when its holder records it is refused now.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec

from .._errors import RecordTooLargeError
from ._format import MAX_PAYLOAD
from ._records import AnyEvent, Event, encode_event


def stamp_events(
    events: Iterable[Event], first_seq: int, where: str, at: float | None = None
) -> tuple[list[AnyEvent], list[bytes]]:
    """Give ``events`` contiguous ``seq`` from ``first_seq`` and ``at`` (kept if set; else
    ``at``, or now); encode them.

    Raises:
        RecordTooLargeError: an encoded event exceeds the frame limit (``where`` names the run).
    """
    stamped = stamp(events, first_seq, at)
    payloads: list[bytes] = []
    for ev in stamped:
        data = encode_event(ev)
        if len(data) > MAX_PAYLOAD:
            raise RecordTooLargeError(where, len(data), MAX_PAYLOAD)
        payloads.append(data)
    return stamped, payloads


def stamp(events: Iterable[Event], first_seq: int, at: float | None = None) -> list[AnyEvent]:
    """``events`` with contiguous ``seq`` from ``first_seq`` and ``at`` (unless set: ``at``,
    the appender's clock, or now)."""
    return stamp_in_place(list(events), first_seq, at)


def stamp_in_place(events: list[Event], first_seq: int, at: float | None = None) -> list[AnyEvent]:
    """``stamp``, replacing each event of ``events`` by its stamped copy; returns ``events``
    (an append's own list, so that it holds one list of its events, not two)."""
    now = at or time.time()
    replace = msgspec.structs.replace
    for i, ev in enumerate(events):
        events[i] = replace(ev, seq=first_seq + i, at=ev.at or now)
    return events  # type: ignore[return-value]  # (every item is stamped now)


STAMP_ROOM = 16
"""Bytes an event may grow by when stamped (``seq`` and ``at`` set): an answer queued with
``seq`` -1 must still fit a frame once its holder gives it a real ``seq``."""


def queueable(event: Event, where: str) -> bytes:
    """``event`` encoded, as an answer queued for a run's holder; checked to fit a frame once
    stamped, so that no answer is acknowledged that its journal will refuse.

    Raises:
        RecordTooLargeError: the encoded event (with room for its stamp) exceeds the frame
            limit; ``where`` names the run.
    """
    data = encode_event(event)
    if len(data) + STAMP_ROOM > MAX_PAYLOAD:
        raise RecordTooLargeError(where, len(data) + STAMP_ROOM, MAX_PAYLOAD)
    return data
