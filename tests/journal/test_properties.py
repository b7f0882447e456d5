"""Property tests: the event codec, the scanner on arbitrary bytes, and crash/recovery as a model.

(a) Every event type survives encode/decode with any field values its schema admits.
(b) ``scan`` on any bytes either raises the two typed errors a caller expects or returns a
    ``Scan`` that is consistent with the bytes; it never raises anything else.
(c) A state machine appends through a real ``FileStore``, crashes (the file as a crash would leave
    it: acknowledged groups, preallocated zeros, part or all of an unacknowledged group), reopens,
    and checks that exactly the acknowledged events come back, plus the in-flight group if and
    only if all of it reached the file.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import shutil
import tempfile
from typing import Any

import hypothesis
import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tether import JournalCorruptError, JournalVersionError
from tether.journal import AnyEvent, Event, FileJournal, FileStore, ToolResult
from tether.journal._format import (
    ALIGN,
    HEADER_SIZE,
    MAX_PAYLOAD,
    build_group,
    encode_header,
    frame_size,
    payload_crc,
)
from tether.journal._reader import Scan, scan
from tether.journal._records import EVENT_TYPES, decode_event, encode_event

from ._journals import build_sample, encode_group, sample_events, stamp

RUN = "run-prop"

# --- (a) the codec -------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
JSON = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def strategy_for(t: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy for every value of the msgspec type ``t`` (JSON-like values for ``Any``)."""
    if isinstance(t, mi.AnyType):
        return JSON
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        return st.integers(-(2**63), 2**64 - 1)
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False)
    if isinstance(t, mi.StrType):
        return st.text(max_size=30)
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.UnionType):
        return st.one_of(*(strategy_for(x) for x in t.types))
    if isinstance(t, mi.ListType):
        return st.lists(strategy_for(t.item_type), max_size=3)
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=3)
    if isinstance(t, mi.StructType):
        fields = {f.name: strategy_for(f.type) for f in t.fields}
        return st.builds(t.cls, **fields)
    raise NotImplementedError(f"no strategy for {t!r}")  # a new field type: extend this


def event_strategy(cls: type[Event]) -> st.SearchStrategy[Event]:
    return strategy_for(mi.type_info(cls))


EVENTS: st.SearchStrategy[Event] = st.one_of(*(event_strategy(cls) for cls in EVENT_TYPES))


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(event_strategy(cls))
    encoded = encode_event(event)
    decoded = decode_event(encoded)
    assert type(decoded) is cls
    assert decoded == event
    assert encode_event(decoded) == encoded  # same bytes, so no bool/int or int/float drift


@settings(max_examples=60, deadline=None)
@given(events=st.lists(EVENTS, min_size=1, max_size=6), split=st.integers(0, 6))
def test_events_round_trip_through_a_journal_file(events: list[Event], split: int) -> None:
    split = min(split, len(events))
    groups = [g for g in (events[:split], events[split:]) if g]
    sample = build_sample(RUN, groups)
    result = scan(sample.data, "mem", expect_run_id=RUN)
    assert result.damage is None
    assert result.events == sample.events
    assert [e.seq for e in result.events] == list(range(len(events)))
    assert result.groups == len(groups)


# --- (b) the scanner on arbitrary bytes ----------------------------------------------------


_VALID = build_sample(RUN, sample_events(random.Random(4), (1, 2, 3, 1), run_id=RUN))
VALID = _VALID.data
VALID_EVENTS = _VALID.events
VALID_ENDS = [HEADER_SIZE, *_VALID.ends]


def check_scan(data: bytes) -> Scan | None:
    """Scan ``data``; allow only the typed errors, and check the result against the bytes."""
    try:
        result = scan(data, "mem")
    except (JournalCorruptError, JournalVersionError):
        return None
    assert result.file_size == len(data)
    assert HEADER_SIZE <= result.end <= len(data)
    assert result.end % ALIGN == 0
    assert [e.seq for e in result.events] == list(range(len(result.events)))
    assert result.last_seq == len(result.events) - 1
    assert (result.groups == 0) == (not result.events)
    if result.damage is None:
        assert not data[result.end :].strip(b"\x00")
    else:
        assert result.damage.offset == result.end
        assert result.end <= result.damage.at < len(data)
        assert result.damage.seq == len(result.events)
        assert result.damage.kind in ("torn", "corrupt")
    # The data before ``end`` is a journal of its own, with nothing after it.
    again = scan(data[: result.end], "mem")
    assert again.events == result.events
    assert again.damage is None
    return result


FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=st.binary(max_size=1024))
def test_scan_of_arbitrary_bytes(data: bytes) -> None:
    check_scan(data)


@FUZZ
@given(tail=st.binary(max_size=4096))
def test_scan_of_a_valid_header_and_arbitrary_bytes(tail: bytes) -> None:
    check_scan(encode_header(RUN) + tail)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.integers(0, len(VALID)),
    extra=st.binary(max_size=64),
)
def test_scan_of_a_mangled_journal(edits: list[tuple[int, int]], cut: int, extra: bytes) -> None:
    buf = bytearray(VALID)
    for offset, value in edits:
        buf[offset] = value
    result = check_scan(bytes(buf[:cut]) + extra)
    if result is not None:
        # Whatever a damaged file yields is a prefix of what the undamaged one holds.
        assert result.events == VALID_EVENTS[: len(result.events)]


@FUZZ
@given(
    payloads=st.lists(
        st.binary(max_size=64)
        | JSON.map(msgspec.msgpack.encode)
        | st.builds(
            lambda tag, seq, rest: msgspec.msgpack.encode({"type": tag, "seq": seq, **rest}),
            st.sampled_from([cls.__struct_config__.tag for cls in EVENT_TYPES] + ["nope", 7]),
            st.integers(-2, 12),
            st.dictionaries(st.sampled_from(["call_id", "ok", "at", "message"]), JSON, max_size=3),
        ),
        min_size=1,
        max_size=4,
    ),
    before=st.integers(0, 4),
)
def test_scan_of_checksummed_frames_holding_anything(payloads: list[bytes], before: int) -> None:
    """Frames whose checksums are right but whose payloads are arbitrary: the decoder's turn."""
    prefix = VALID[: VALID_ENDS[before]]
    group = build_group([(p, payload_crc(p)) for p in payloads if p])
    result = check_scan(prefix + group + build_group([(b"\xc0", payload_crc(b"\xc0"))]))
    assert result is not None
    assert result.end >= len(prefix)


def test_scan_reports_a_deeply_nested_payload_as_damage() -> None:
    # A checksummed frame whose content nests 100 000 lists deep: msgspec's decoder gives up
    # with RecursionError, which ``read_group`` does not catch, so ``open``/``read`` of such a
    # journal fail with an untyped error instead of JournalCorruptError.
    head = msgspec.msgpack.encode({"type": "tool_result", "seq": 0, "call_id": "c", "ok": True})
    payload = bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("content")
    payload += b"\x91" * 100_000 + b"\xc0"
    assert len(payload) < MAX_PAYLOAD
    data = encode_header(RUN) + build_group([(payload, payload_crc(payload))])
    result = check_scan(data)
    assert result is not None
    assert result.damage is not None
    assert result.damage.kind == "corrupt"


# --- (c) crash and recovery, as a state machine --------------------------------------------

MACHINE_EVENTS = EVENTS | st.builds(
    ToolResult, call_id=st.text(max_size=8), ok=st.booleans(), content=st.text(max_size=3000)
)


class CrashRecovery(RuleBasedStateMachine):
    """Append, crash, reopen; the journal must hold exactly what was acknowledged."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tether-machine-"))
        self.runner = asyncio.Runner()
        self.store = FileStore(self.dir, redact=None, blob_threshold=1 << 30, sync_threads=1)
        self.runner.run(self.store.__aenter__())
        self.journal: FileJournal = self.runner.run(self.store.create(RUN))
        self.path = pathlib.Path(self.store.location(RUN))
        self.acked: list[AnyEvent] = []
        self.end = HEADER_SIZE  # where the acknowledged groups end
        self.crashes = 0

    def _grow(self, events: list[AnyEvent]) -> None:
        self.acked.extend(events)
        self.end += sum(frame_size(len(encode_event(e))) for e in events)

    @rule(events=st.lists(MACHINE_EVENTS, min_size=1, max_size=5))
    def append(self, events: list[Event]) -> None:
        stamped = self.runner.run(self.journal.append(events))
        assert [e.seq for e in stamped] == list(
            range(len(self.acked), len(self.acked) + len(events))
        )
        self._grow(stamped)

    @rule(
        batches=st.lists(st.lists(MACHINE_EVENTS, min_size=1, max_size=3), min_size=2, max_size=4)
    )
    def append_concurrently(self, batches: list[list[Event]]) -> None:
        """Appends racing each other may share one write; each keeps its place in call order."""

        async def all_at_once() -> list[list[AnyEvent]]:
            return list(await asyncio.gather(*(self.journal.append(b) for b in batches)))

        for stamped in self.runner.run(all_at_once()):
            assert stamped[0].seq == len(self.acked)
            self._grow(stamped)

    @rule(
        inflight=st.none() | st.lists(MACHINE_EVENTS, min_size=1, max_size=4),
        keep=st.just(1.0) | st.floats(0, 1),
        hole=st.none() | st.tuples(st.floats(0, 1), st.integers(1, 700)),
        drop_zeros=st.booleans(),
    )
    def crash(
        self,
        inflight: list[Event] | None,
        keep: float,
        hole: tuple[float, int] | None,
        drop_zeros: bool,
    ) -> None:
        """The process dies: the file keeps its acknowledged groups, its preallocated zeros
        (unless ``drop_zeros``), and the part of the unacknowledged group that got written
        (``keep`` of it, maybe with a ``hole`` of sectors that never made it)."""
        data = bytearray(self.path.read_bytes())
        assert len(data) >= self.end
        if drop_zeros:
            del data[self.end :]
        stamped: list[AnyEvent] = []
        group = b""
        if inflight is not None:
            stamped = stamp(inflight, len(self.acked))
            group = encode_group(stamped)
            n = round(keep * len(group))
            data[self.end : self.end + n] = group[:n]
            if hole is not None and n:
                lo = self.end + int(hole[0] * n)
                hi = min(lo + hole[1], self.end + n)
                data[lo:hi] = bytes(hi - lo)
        complete = bool(group) and bytes(data[self.end : self.end + len(group)]) == group
        hypothesis.event(
            "in-flight group: " + ("none" if not group else "whole" if complete else "torn")
        )

        self.runner.run(self.journal.aclose())  # releases the lock; the snapshot replaces it
        tmp = self.path.with_name("snapshot.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        self.journal = self.runner.run(self.store.open(RUN))
        self.crashes += 1

        expected = [*self.acked, *stamped] if complete else list(self.acked)
        assert self.journal.events == expected
        if complete:
            self._grow(stamped)
        assert self.journal.size == self.end
        assert self.path.stat().st_size == self.end
        for name in os.listdir(self.path.parent):
            if ".torn-" in name:
                os.unlink(self.path.parent / name)

    @rule()
    def reopen(self) -> None:
        self.runner.run(self.journal.aclose())
        assert self.path.stat().st_size == self.end  # close trims the preallocated zeros
        self.journal = self.runner.run(self.store.open(RUN))
        assert self.journal.events == self.acked

    @invariant()
    def disk_holds_exactly_the_acknowledged_events(self) -> None:
        result = scan(self.path.read_bytes(), str(self.path), expect_run_id=RUN)
        assert result.damage is None
        assert result.events == self.acked
        assert result.end == self.end == self.journal.size
        assert self.journal.events == self.acked

    def teardown(self) -> None:
        try:
            self.runner.run(self.store.aclose())
        finally:
            self.runner.close()
            shutil.rmtree(self.dir, ignore_errors=True)


CrashRecovery.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCrashRecovery = CrashRecovery.TestCase
