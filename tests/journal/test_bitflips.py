"""J3: every single-bit flip in a journal of 20 events is caught, and classified right.

A flip in a frame's header or payload breaks that frame's checksum (CRC-32 catches every
single-bit error); a flip in the zero padding after a payload, which no checksum covers, breaks
the rule that padding is zero. Either way the reader must return exactly the groups before the
damaged one, and call the damage a torn tail only when it is in the last group; anywhere else a
valid frame of a later group follows, so the damage is corruption and ``verify_file``/``open``
refuse the file. A flip in the preallocated zeros after the last group is a torn tail (something
was written there that is not a group). Nothing a flip can touch goes unnoticed.

A flip in the file header must always be refused.
"""

from __future__ import annotations

import pathlib
import random
import struct
import time
import tracemalloc

import pytest

from tether import JournalCorruptError, JournalVersionError
from tether.journal import FileStore, verify_file
from tether.journal._format import HEADER_SIZE
from tether.journal._reader import scan

from ._journals import Frame, Sample, build_sample, install, sample_events, side_files

RUN = "run-flip"
GROUP_SIZES = (2, 3, 1, 4, 2, 3, 1, 4)
PREALLOCATED = 64
"""Zero bytes after the last group, as the writer leaves them (preallocated space)."""
_SAMPLE: list[Sample] = []


def _sample() -> Sample:
    if not _SAMPLE:
        groups = sample_events(random.Random(3), GROUP_SIZES, run_id=RUN, max_payload=48)
        _SAMPLE.append(build_sample(RUN, groups))
    return _SAMPLE[0]


def _flip(data: bytes, offset: int, bit: int) -> bytes:
    buf = bytearray(data)
    buf[offset] ^= 1 << bit
    return bytes(buf)


def _check_flip(sample: Sample, data: bytes, offset: int) -> str:
    """Scan ``data`` (``sample``, then zeros, with one bit flipped at ``offset``); return the
    damage kind, which must be the right one."""
    result = scan(data, "mem", expect_run_id=RUN)
    assert result.damage is not None, f"flip at {offset} went unnoticed"
    if offset >= len(sample.data):  # in the preallocated zeros
        assert result.events == sample.events
        assert result.end == len(sample.data)
        assert result.damage.kind == "torn", (offset, result.damage)
        return "torn"
    frame = sample.frame_at(offset)
    last = len(sample.groups) - 1
    assert result.events == sample.events_of(frame.group)
    assert result.end == sample.starts[frame.group]
    assert result.damage.offset == sample.starts[frame.group]
    assert result.damage.at == frame.start
    assert result.damage.seq == len(result.events)
    assert result.damage.kind == ("torn" if frame.group == last else "corrupt"), (
        offset,
        result.damage,
    )
    return result.damage.kind


def test_sample_has_twenty_events_in_eight_groups() -> None:
    sample = _sample()
    assert len(sample.events) == 20
    assert len(sample.groups) == 8
    assert sum(f.end - f.payload_end for f in sample.frames) >= 40, "too little padding"


def test_every_bit_flip_after_the_header_is_caught_padding_included() -> None:
    sample = _sample()
    buf = bytearray(sample.data + bytes(PREALLOCATED))
    kinds = {"torn": 0, "corrupt": 0}
    for offset in range(HEADER_SIZE, len(buf)):
        for bit in range(8):
            buf[offset] ^= 1 << bit
            kinds[_check_flip(sample, bytes(buf), offset)] += 1
            buf[offset] ^= 1 << bit
    flips = (len(buf) - HEADER_SIZE) * 8
    padding = sum(f.end - f.payload_end for f in sample.frames) * 8
    last_group = (len(sample.data) - sample.starts[-1]) * 8
    assert sum(kinds.values()) == flips
    assert kinds == {"torn": last_group + PREALLOCATED * 8, "corrupt": flips - kinds["torn"]}
    assert kinds["corrupt"] > 10_000
    assert padding > 300  # flips in padding were among them


def _frame_field_offsets(frame: Frame) -> list[int]:
    """One byte of each header field, the first and last payload byte, and the padding."""
    fields = [frame.start + d for d in (0, 4, 8, 12)]
    return [*fields, frame.start + 16, frame.payload_end - 1, *range(frame.payload_end, frame.end)]


@pytest.mark.slow
def test_verify_file_refuses_a_flip_in_any_group_but_the_last(tmp_path: pathlib.Path) -> None:
    sample = _sample()
    path = tmp_path / f"{RUN}.journal"
    checked = 0
    for frame in sample.frames:
        for offset in _frame_field_offsets(frame):
            for bit in range(8):
                data = _flip(sample.data, offset, bit)
                path.write_bytes(data)
                if frame.group == len(sample.groups) - 1:
                    result = verify_file(str(path))
                    assert result.damage is not None
                    assert result.damage.kind == "torn"
                    assert result.events == sample.events_of(frame.group)
                else:
                    with pytest.raises(JournalCorruptError) as info:
                        verify_file(str(path))
                    assert info.value.path == str(path)
                    assert info.value.offset == frame.start
                    assert info.value.seq == len(sample.events_of(frame.group))
                    assert "later group" in info.value.reason
                checked += 1
                assert path.read_bytes() == data
    assert checked > 1000


async def test_open_refuses_a_flip_in_any_group_but_the_last(tmp_path: pathlib.Path) -> None:
    sample = _sample()
    root = tmp_path / "store"
    rng = random.Random(5)
    async with FileStore(root, redact=None, sync_threads=1) as store:
        for frame in sample.frames:
            offset = rng.randrange(frame.start, frame.end)
            data = _flip(sample.data, offset, rng.randrange(8))
            path = install(root, RUN, data)
            if frame.group < len(sample.groups) - 1:
                with pytest.raises(JournalCorruptError) as info:
                    await store.open(RUN)
                assert info.value.offset == frame.start
                assert path.read_bytes() == data, "open changed a corrupt journal"
                assert side_files(root) == []
                with pytest.raises(JournalCorruptError):
                    await store.read(RUN)
            else:
                # Damage in the last group is indistinguishable from an unfinished write.
                journal = await store.open(RUN)
                assert journal.events == sample.events_of(frame.group)
                assert path.read_bytes() == sample.data[: sample.starts[frame.group]]
                await journal.aclose()
                for name in side_files(root):
                    (root / "runs" / name).unlink()


def test_every_bit_flip_in_the_header_is_refused(tmp_path: pathlib.Path) -> None:
    sample = _sample()
    buf = bytearray(sample.data)
    path = tmp_path / f"{RUN}.journal"
    outcomes = {JournalCorruptError: 0, JournalVersionError: 0}
    for offset in range(HEADER_SIZE):
        for bit in range(8):
            buf[offset] ^= 1 << bit
            data = bytes(buf)
            buf[offset] ^= 1 << bit
            with pytest.raises((JournalCorruptError, JournalVersionError)) as info:
                scan(data, "mem", expect_run_id=RUN)
            outcomes[type(info.value)] += 1
            if isinstance(info.value, JournalCorruptError):
                assert info.value.offset == 0
                assert info.value.seq is None
            if offset % 16 == 0:  # and through the file API, for a sample of offsets
                path.write_bytes(data)
                with pytest.raises((JournalCorruptError, JournalVersionError)):
                    verify_file(str(path))
    assert sum(outcomes.values()) == HEADER_SIZE * 8
    assert outcomes[JournalCorruptError] > 0


async def test_open_refuses_a_flipped_header(tmp_path: pathlib.Path) -> None:
    sample = _sample()
    root = tmp_path / "store"
    async with FileStore(root, redact=None, sync_threads=1) as store:
        for offset in (0, 8, 10, 12, 14, 16, 20, 100, 251, 252, 255):
            data = _flip(sample.data, offset, offset % 8)
            path = install(root, RUN, data)
            with pytest.raises((JournalCorruptError, JournalVersionError)):
                await store.open(RUN)
            assert path.read_bytes() == data


def _set_u32(data: bytes, offset: int, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<I", buf, offset, value)
    return bytes(buf)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (4, 2**32 - 1),  # length
        (4, 32 * 1024 * 1024),  # length at the payload limit, past the end of the file
        (12, 2**32 - 8),  # group_len
        (8, 2**32 - 8),  # group_off
    ],
)
def test_a_huge_length_field_allocates_nothing(field: int, value: int) -> None:
    sample = _sample()
    for frame in (sample.frames[0], sample.frames[9], sample.frames[-1]):
        data = _set_u32(sample.data, frame.start + field, value)
        tracemalloc.start()
        started = time.perf_counter()
        try:
            result = scan(data, "mem", expect_run_id=RUN)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        elapsed = time.perf_counter() - started
        assert result.damage is not None
        assert result.damage.at == frame.start
        last = frame.group == len(sample.groups) - 1
        assert result.damage.kind == ("torn" if last else "corrupt")
        assert result.events == sample.events_of(frame.group)
        assert peak < 2 * 1024 * 1024, f"scan allocated {peak} bytes"
        assert elapsed < 2.0


def test_a_flipped_version_field_is_corruption_not_a_newer_format() -> None:
    # 15 of the 2048 single-bit flips in the header land in the version field and make it read
    # 3, 5, 9, ..., 257...: the header checksum no longer matches, yet the reader reports
    # "written by a newer format, upgrade tether" instead of a damaged header.
    data = _flip(_sample().data, 8, 1)  # version 1 -> 3
    with pytest.raises(JournalCorruptError):
        scan(data, "mem", expect_run_id=RUN)
