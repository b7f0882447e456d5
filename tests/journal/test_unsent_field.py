"""``tool_failed``'s ``unsent`` (an attempt that never reached the tool's service), under the
vocabulary's rules: a new field with a default, so journals written before it read as they
were, and one an older reader can ignore without misreading the record."""

from __future__ import annotations

import msgspec

from tether.journal import ToolFailed
from tether.journal._records import decode_event, encode_event


class _OldToolFailed(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tool_failed"
):
    """``tool_failed`` as tether wrote and read it before ``unsent`` existed."""

    seq: int = -1
    at: float = 0.0
    call_id: str
    attempt: int
    error: str
    timed_out: bool = False
    retry_at: float | None = None


def test_an_unsent_attempt_round_trips() -> None:
    event = ToolFailed(
        call_id="toolu_1", attempt=3, error="down", retry_at=12.5, unsent=True, seq=7, at=10.0
    )
    decoded = decode_event(encode_event(event))
    assert decoded == event
    assert isinstance(decoded, ToolFailed)
    assert decoded.unsent


def test_a_record_from_before_the_field_reads_as_sent() -> None:
    old = msgspec.msgpack.encode(
        _OldToolFailed(call_id="toolu_1", attempt=1, error="ConnectionError: reset", seq=4)
    )
    decoded = decode_event(old)
    assert isinstance(decoded, ToolFailed)
    assert (decoded.unsent, decoded.timed_out, decoded.error) == (
        False,
        False,
        "ConnectionError: reset",
    )


def test_an_older_reader_takes_an_unsent_attempt_as_a_known_failure() -> None:
    """It ignores the field, and finds a failure without ``timed_out``: one in ``retry_on``,
    which it runs again (safe: nothing was sent), never an unknown outcome."""
    new = encode_event(ToolFailed(call_id="toolu_1", attempt=2, error="down", unsent=True))
    old = msgspec.msgpack.decode(new, type=_OldToolFailed)
    assert (old.attempt, old.error, old.timed_out) == (2, "down", False)
