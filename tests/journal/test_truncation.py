"""A journal cut short anywhere, or followed by junk, loses nothing that was acknowledged.

J1: every byte offset from the start of the third-to-last group to the end of the file.
J2: 1 to 8192 bytes of zeros or random bytes after the last group.

An append returns only once its group is durable, so a file cut at offset ``n`` can only be the
result of a crash if every group lying wholly before ``n`` was acknowledged and nothing after it
was. The reader must return exactly those groups, report the rest as a torn tail, and opening
must truncate the tail for good, so that the next append lands right after the last good group.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.journal import Event, FileStore, ToolStarted, verify_file
from tether.journal._format import FRAME_HEADER_SIZE, HEADER_SIZE
from tether.journal._reader import scan

from ._journals import (
    T0,
    RecordingFileOps,
    Sample,
    build_sample,
    install,
    sample_events,
    side_files,
    write_sample,
)

RUN = "run-trunc"
GROUP_SIZES = (1, 3, 1, 5, 2, 4, 1, 2, 5, 3)


def _groups() -> list[list[Event]]:
    return sample_events(random.Random(1), GROUP_SIZES, run_id=RUN, max_payload=300)


@functools.cache
def _model() -> Sample:
    return build_sample(RUN, _groups())


@pytest.fixture
async def sample(tmp_path: pathlib.Path) -> Sample:
    """Ten groups written through a real ``FileStore``, with their layout."""
    written = await write_sample(tmp_path / "writer", RUN, _groups())
    assert written == _model().data, "the writer's bytes differ from the format's layout"
    return _model()


def _tail_offsets(sample: Sample) -> range:
    return range(sample.starts[-3], len(sample.data) + 1)


def _check_scan(sample: Sample, data: bytes) -> None:
    """What any reader must find in ``data``, a prefix of ``sample`` (perhaps plus junk)."""
    cut = min(len(data), len(sample.data))
    result = scan(data, "mem", expect_run_id=RUN)
    end = sample.end_before(cut)
    assert result.events == sample.events_before(cut)
    assert result.groups == sample.complete_groups(cut)
    assert result.end == end
    if result.damage is None:
        assert not data[end:].strip(b"\x00"), "bytes after the end of data were ignored"
    else:
        assert result.damage.kind == "torn", result.damage
        assert result.damage.offset == end
        assert result.damage.seq == len(result.events)


def test_writer_lays_out_groups_as_the_model_does(sample: Sample) -> None:
    # The fixture compares the bytes; here, the layout the other tests rely on.
    assert sample.starts[0] == HEADER_SIZE
    assert sample.starts[1:] == sample.ends[:-1]
    assert sample.ends[-1] == len(sample.data)
    assert sum(len(g) for g in sample.groups) == sum(GROUP_SIZES)


def test_every_cut_in_the_last_three_groups_keeps_the_acknowledged_prefix(sample: Sample) -> None:
    offsets = _tail_offsets(sample)
    assert len(offsets) > 2000
    for cut in offsets:
        _check_scan(sample, sample.data[:cut])


def _sampled_cuts(sample: Sample) -> list[int]:
    """Cuts around every frame's header, payload end and padding, plus a random spread."""
    offsets = _tail_offsets(sample)
    cuts: set[int] = set()
    for frame in sample.frames:
        if frame.start < offsets.start:
            continue
        for d in (0, 1, 4, 8, 12, FRAME_HEADER_SIZE - 1, FRAME_HEADER_SIZE, FRAME_HEADER_SIZE + 1):
            cuts.add(frame.start + d)
        cuts.update((frame.payload_end - 1, frame.payload_end, frame.end - 1, frame.end))
    cuts.update(random.Random(7).sample(offsets, 200))
    return sorted(c for c in cuts if c in offsets)


async def test_open_truncates_a_cut_durably_and_appends_after_it(
    tmp_path: pathlib.Path, sample: Sample
) -> None:
    root = tmp_path / "store"
    ops = RecordingFileOps()
    cuts = _sampled_cuts(sample)
    assert len(cuts) > 250
    async with FileStore(root, redact=None, sync_threads=1, file_ops=ops) as store:
        for cut in cuts:
            path = install(root, RUN, sample.data[:cut])
            end = sample.end_before(cut)
            result = verify_file(str(path))  # a torn tail is never reported as corruption
            assert result.events == sample.events_before(cut)
            assert (result.damage is None) == (not sample.data[end:cut].strip(b"\x00"))
            assert path.read_bytes() == sample.data[:cut], "verify_file changed the file"

            ops.log.clear()
            journal = await store.open(RUN)
            acked = sample.events_before(cut)
            assert journal.events == acked
            assert journal.next_seq == len(acked)
            assert journal.size == end
            assert os.path.getsize(path) == end, "the torn tail was not truncated"
            if cut > end:
                assert any(name == "ftruncate" for name, _ in ops.log)
            assert ops.truncations_synced(), "a truncation was not fsync'd"
            kept = sample.data[end:cut].rstrip(b"\x00")
            if kept:  # the torn bytes are kept beside the journal for a post-mortem
                torn_file = root / "runs" / f"{RUN}.journal.torn-{end}"
                assert side_files(root) == [torn_file.name]
                assert torn_file.read_bytes() == kept
                torn_file.unlink()
            assert side_files(root) == []

            extra = await journal.append([ToolStarted(at=T0, call_id=f"after-{cut}")])
            assert extra[0].seq == len(acked)
            await journal.aclose()
            assert path.read_bytes()[:end] == sample.data[:end]
            journal = await store.open(RUN)
            assert journal.events == [*acked, *extra]
            await journal.aclose()
            assert side_files(root) == []


JUNK_SIZES = (1, 2, 7, 8, 9, 15, 16, 17, 31, 100, 511, 512, 513, 4095, 4096, 8192)


@pytest.mark.parametrize("size", JUNK_SIZES)
@pytest.mark.parametrize("kind", ["zeros", "random"])
async def test_junk_after_the_last_group_is_a_torn_tail(
    tmp_path: pathlib.Path, sample: Sample, size: int, kind: str
) -> None:
    junk = bytes(size) if kind == "zeros" else random.Random(size).randbytes(size)
    data = sample.data + junk
    _check_scan(sample, data)
    root = tmp_path / "store"
    path = install(root, RUN, data)
    result = verify_file(str(path))
    assert result.events == sample.events
    assert (result.damage is None) == (kind == "zeros")
    async with FileStore(root, redact=None, sync_threads=1) as store:
        journal = await store.open(RUN)
        assert journal.events == sample.events
        assert os.path.getsize(path) == len(sample.data)
        if kind == "random":
            torn = root / "runs" / f"{RUN}.journal.torn-{len(sample.data)}"
            assert torn.read_bytes() == junk.rstrip(b"\x00")
        extra = await journal.append([ToolStarted(at=T0, call_id="after")])
        await journal.aclose()
        assert await store.read(RUN) == [*sample.events, *extra]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(min_size=1, max_size=8192), cut_groups=st.integers(0, 3))
def test_any_junk_after_any_group_boundary_is_a_torn_tail(junk: bytes, cut_groups: int) -> None:
    sample = _model()
    end = sample.ends[len(sample.ends) - 1 - cut_groups]
    data = sample.data[:end] + junk
    result = scan(data, "mem", expect_run_id=RUN)
    assert result.events == sample.events_before(end)
    assert result.end == end
    if junk.strip(b"\x00"):
        assert result.damage is not None
        assert result.damage.kind == "torn"
        assert result.damage.offset == end
    else:
        assert result.damage is None
