"""Stamping events for any store: each gets its ``seq`` and ``at``, and its encoding is checked."""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec

from .._errors import RecordTooLargeError
from ._format import MAX_PAYLOAD
from ._records import AnyEvent, Event, encode_event


def stamp_events(
    events: Iterable[Event], first_seq: int, where: str
) -> tuple[list[AnyEvent], list[bytes]]:
    """Give ``events`` contiguous ``seq`` from ``first_seq`` and ``at`` (kept if set); encode them.

    Raises:
        RecordTooLargeError: an encoded event exceeds the frame limit (``where`` names the run).
    """
    now = time.time()
    stamped: list[AnyEvent] = []
    payloads: list[bytes] = []
    for seq, ev in enumerate(events, first_seq):
        ev = msgspec.structs.replace(ev, seq=seq, at=ev.at or now)
        data = encode_event(ev)
        if len(data) > MAX_PAYLOAD:
            raise RecordTooLargeError(where, len(data), MAX_PAYLOAD)
        payloads.append(data)
        stamped.append(ev)  # type: ignore[arg-type]
    return stamped, payloads
