"""J4: damage in the middle of a journal is refused, left alone, and repaired only on request.

Each case damages a good journal so that valid data follows the damage (or a checksummed
frame breaks the rules). Opening must raise ``JournalCorruptError`` naming the file, the offset
of the first bad frame, the expected ``seq`` and a reason, and must not change a byte on disk.
``repair_file(apply=False)`` only reports; ``repair_file(apply=True)`` copies everything after
the last good group to a ``.broken`` file and truncates there, after which the journal opens
with the good prefix and takes appends again.
"""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import pytest

from tether import JournalCorruptError
from tether.journal import FileStore, ToolStarted, repair_file, verify_file
from tether.journal._format import HEADER_SIZE, build_group, payload_crc
from tether.journal._reader import scan

from ._journals import T0, Sample, build_sample, encode_group, install, sample_events, side_files

RUN = "run-mid"
GROUP_SIZES = (1, 2, 4, 1, 3, 5, 2, 1, 3, 2)
SECTOR = 512


@dataclass(frozen=True)
class Damaged:
    """A damaged copy of the sample and what a reader must say about it."""

    data: bytes
    good_groups: int  # groups before the damage: what survives a repair
    at: int  # offset of the first bad frame
    reason: str  # a word the error's reason must contain


def _sample() -> Sample:
    groups = sample_events(random.Random(11), GROUP_SIZES, run_id=RUN, max_payload=400)
    return build_sample(RUN, groups)


def _group(sample: Sample, i: int) -> bytes:
    return sample.data[sample.starts[i] : sample.ends[i]]


def swapped(sample: Sample) -> Damaged:
    """Groups 3 and 4 trade places (they have different sizes)."""
    a, b = _group(sample, 3), _group(sample, 4)
    assert len(a) != len(b)
    data = sample.data[: sample.starts[3]] + b + a + sample.data[sample.ends[4] :]
    return Damaged(data, 3, sample.starts[3], "gap")


def duplicated(sample: Sample) -> Damaged:
    """Group 5 is written twice."""
    g = _group(sample, 5)
    data = sample.data[: sample.ends[5]] + g + sample.data[sample.ends[5] :]
    return Damaged(data, 6, sample.ends[5], "duplicate")


def duplicated_last(sample: Sample) -> Damaged:
    """The last group is written twice: checksummed but out of sequence, so not a torn tail."""
    return Damaged(sample.data + _group(sample, 9), 10, len(sample.data), "duplicate")


def seq_gap_between_groups(sample: Sample) -> Damaged:
    """From group 6 on, every seq is one too high: a valid group skips a number."""
    data = sample.data[: sample.starts[6]]
    seq = len(sample.events_of(6)) + 1
    for group in sample.groups[6:]:
        data += encode_group(
            [msgspec.structs.replace(ev, seq=seq + i) for i, ev in enumerate(group)]
        )
        seq += len(group)
    return Damaged(data, 6, sample.starts[6], "gap")


def seq_gap_inside_a_group(sample: Sample) -> Damaged:
    """Group 5's third event skips a seq; groups 6.. follow intact."""
    events = list(sample.groups[5])
    events[2] = msgspec.structs.replace(events[2], seq=events[2].seq + 1)
    group = encode_group(events)
    data = sample.data[: sample.starts[5]] + group + sample.data[sample.ends[5] :]
    third = [f for f in sample.frames if f.group == 5][2]
    return Damaged(data, 5, third.start, "gap")


def undecodable_payload(sample: Sample) -> Damaged:
    """A checksummed frame whose payload is not an event, followed by good groups."""
    junk = b"\x81\xa4type\xa7unknown"  # {"type": "unknown"}
    group = build_group([(junk, payload_crc(junk))])
    data = sample.data[: sample.ends[4]] + group + sample.data[sample.ends[4] :]
    return Damaged(data, 5, sample.ends[4], "undecodable")


def zeroed_sector(sample: Sample, sector: int) -> Damaged:
    """The 512-byte sector ``sector`` of the file reads back as zeros."""
    lo, hi = sector * SECTOR, (sector + 1) * SECTOR
    data = sample.data[:lo] + bytes(SECTOR) + sample.data[hi:]
    # The first frame whose checksummed bytes lost something.
    bad = next(
        f
        for f in sample.frames
        if any(sample.data[i] for i in range(max(f.start, lo), min(f.payload_end, hi)))
    )
    return Damaged(data, bad.group, bad.start, "")


CASES: dict[str, Callable[[Sample], Damaged]] = {
    "swapped": swapped,
    "duplicated": duplicated,
    "duplicated-last": duplicated_last,
    "seq-gap-between-groups": seq_gap_between_groups,
    "seq-gap-inside-a-group": seq_gap_inside_a_group,
    "undecodable-payload": undecodable_payload,
}


def _sectors(sample: Sample) -> list[int]:
    """Every whole sector after the header that ends before the last group starts."""
    return [
        s for s in range(1, len(sample.data) // SECTOR) if (s + 1) * SECTOR <= sample.starts[-1]
    ]


def test_sample_spans_enough_sectors() -> None:
    assert len(_sectors(_sample())) >= 8


async def _refuse_then_repair(root: pathlib.Path, sample: Sample, damage: Damaged) -> None:
    path = install(root, RUN, damage.data)
    expect_seq = len(sample.events_of(damage.good_groups))
    end = sample.ends[damage.good_groups - 1] if damage.good_groups else HEADER_SIZE
    assert damage.data[:end] == sample.data[:end]

    async with FileStore(root, redact=None, sync_threads=1) as store:
        with pytest.raises(JournalCorruptError) as info:
            await store.open(RUN)
        err = info.value
        assert err.path == str(path)
        assert err.offset == damage.at
        assert err.seq == expect_seq
        assert damage.reason in err.reason
        assert str(path) in str(err)
        assert f"offset {damage.at}" in str(err)
        assert path.read_bytes() == damage.data, "open changed a corrupt journal"
        assert side_files(root) == []
        with pytest.raises(JournalCorruptError):
            await store.read(RUN)
        with pytest.raises(JournalCorruptError):
            verify_file(str(path))

        report = repair_file(str(path), apply=False)
        assert not report.changed
        assert report.events_kept == expect_seq
        assert report.end == end
        assert report.bytes_removed == len(damage.data) - end
        assert report.reason is not None
        assert path.read_bytes() == damage.data, "a dry run changed the journal"
        assert side_files(root) == []

        report = repair_file(str(path), apply=True)
        assert report.changed
        assert report.moved_to == f"{path}.broken"
        assert pathlib.Path(report.moved_to).read_bytes() == damage.data[end:]
        assert path.read_bytes() == sample.data[:end]

        journal = await store.open(RUN)
        assert journal.events == sample.events_of(damage.good_groups)
        extra = await journal.append([ToolStarted(at=T0, call_id="after-repair")])
        assert extra[0].seq == expect_seq
        await journal.aclose()
        assert await store.read(RUN) == [*sample.events_of(damage.good_groups), *extra]
        assert verify_file(str(path)).damage is None


@pytest.mark.parametrize("case", sorted(CASES))
async def test_damage_is_refused_untouched_and_repaired_on_request(
    tmp_path: pathlib.Path, case: str
) -> None:
    sample = _sample()
    damage = CASES[case](sample)
    assert damage.good_groups < len(sample.groups) or case == "duplicated-last"
    await _refuse_then_repair(tmp_path / "store", sample, damage)


async def test_a_zeroed_sector_anywhere_mid_file_is_refused_and_repaired(
    tmp_path: pathlib.Path,
) -> None:
    sample = _sample()
    sectors = _sectors(sample)
    for sector in sectors:
        damage = zeroed_sector(sample, sector)
        assert damage.data != sample.data
        result = scan(damage.data, "mem")
        assert result.damage is not None
        assert result.damage.kind == "corrupt", (sector, result.damage)
        await _refuse_then_repair(tmp_path / f"store-{sector}", sample, damage)


async def test_a_journal_renamed_to_another_run_is_refused(tmp_path: pathlib.Path) -> None:
    sample = _sample()
    root = tmp_path / "store"
    path = install(root, "run-other", sample.data)  # the header still names RUN
    async with FileStore(root, redact=None, sync_threads=1) as store:
        with pytest.raises(JournalCorruptError) as info:
            await store.open("run-other")
        err = info.value
        assert err.path == str(path)
        assert err.offset == 0
        assert err.seq is None
        assert RUN in err.reason
        assert "run-other" in err.reason
        with pytest.raises(JournalCorruptError):
            await store.read("run-other")
        assert path.read_bytes() == sample.data
        assert side_files(root) == []

        # The frames are sound, so there is nothing for repair to cut: it reports no damage and
        # leaves the file (and the refusal) as they are.
        for apply in (False, True):
            report = repair_file(str(path), apply=apply)
            assert not report.changed
            assert report.events_kept == len(sample.events)
        assert path.read_bytes() == sample.data
        assert side_files(root) == []
        with pytest.raises(JournalCorruptError):
            await store.open("run-other")

        # Under its own name it is whole again.
        os.replace(path, root / "runs" / f"{RUN}.journal")
        journal = await store.open(RUN)
        assert journal.events == sample.events
        await journal.aclose()


async def test_repair_keeps_every_broken_tail(tmp_path: pathlib.Path) -> None:
    """A second repair never overwrites the first one's ``.broken`` file."""
    sample = _sample()
    root = tmp_path / "store"
    first = duplicated(sample)
    path = install(root, RUN, first.data)
    report1 = repair_file(str(path), apply=True)
    second = swapped(sample)
    install(root, RUN, second.data)
    report2 = repair_file(str(path), apply=True)
    assert report1.moved_to is not None
    assert report2.moved_to is not None
    assert report1.moved_to != report2.moved_to
    end1, end2 = sample.ends[5], sample.ends[2]
    assert pathlib.Path(report1.moved_to).read_bytes() == first.data[end1:]
    assert pathlib.Path(report2.moved_to).read_bytes() == second.data[end2:]
