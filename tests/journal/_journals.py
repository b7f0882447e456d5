"""Sample journals with a known layout, for the damage tests.

A ``Sample`` is the bytes of a journal plus where each of its groups and frames lies and which
events each group holds, so that a test can compute, for any damaged or truncated copy, exactly
which events a reader must return: the events of the groups that lie wholly before the damage.

``build_sample`` lays the bytes out with the format functions alone; ``write_sample`` writes the
same events through a real ``FileStore`` (test_truncation checks that both agree byte for byte).
Every event carries an explicit ``at``, so the bytes are deterministic.
"""

from __future__ import annotations

import bisect
import os
import pathlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from tether.journal import (
    AnyEvent,
    Decision,
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolResult,
    ToolStarted,
    Usage,
)
from tether.journal._format import (
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    build_group,
    encode_header,
    frame_size,
    payload_crc,
)
from tether.journal._records import encode_event
from tether.journal.lowlevel import FileOps

T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Frame:
    """One frame of a sample: ``[start, payload_end)`` is checksummed, zero padding follows
    up to ``end``."""

    start: int
    payload_end: int
    end: int
    group: int


@dataclass(frozen=True)
class Sample:
    """A journal's bytes and its layout."""

    run_id: str
    data: bytes
    groups: tuple[tuple[AnyEvent, ...], ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    frames: tuple[Frame, ...]

    @property
    def events(self) -> list[AnyEvent]:
        return [ev for group in self.groups for ev in group]

    def complete_groups(self, size: int) -> int:
        """How many groups lie wholly within the first ``size`` bytes."""
        return bisect.bisect_right(self.ends, size)

    def end_before(self, size: int) -> int:
        """End of the last group that lies wholly within the first ``size`` bytes."""
        n = self.complete_groups(size)
        return self.ends[n - 1] if n else HEADER_SIZE

    def events_of(self, n_groups: int) -> list[AnyEvent]:
        """The events of the first ``n_groups`` groups: the acknowledged prefix."""
        return [ev for group in self.groups[:n_groups] for ev in group]

    def events_before(self, size: int) -> list[AnyEvent]:
        return self.events_of(self.complete_groups(size))

    def frame_at(self, offset: int) -> Frame:
        """The frame that holds byte ``offset`` (which must lie after the header)."""
        i = bisect.bisect_right([f.start for f in self.frames], offset) - 1
        frame = self.frames[i]
        assert frame.start <= offset < frame.end
        return frame


def sample_events(
    rng: random.Random,
    group_sizes: Sequence[int],
    *,
    run_id: str,
    min_payload: int = 0,
    max_payload: int = 2000,
) -> list[list[Event]]:
    """Groups of events of mixed types; the first group starts with ``RunStarted``.

    Payload sizes are drawn from ``[min_payload, max_payload]`` so that frames (and their
    padding) vary; contents are printable ASCII, so a reader cannot mistake them for zeros.
    """
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-"
    counter = 0
    groups: list[list[Event]] = []
    for size in group_sizes:
        group: list[Event] = []
        for _ in range(size):
            at = T0 + counter
            text = "".join(rng.choices(alphabet, k=rng.randint(min_payload, max_payload)))
            call_id = f"call-{counter}"
            if counter == 0:
                group.append(
                    RunStarted(
                        at=at,
                        run_id=run_id,
                        manifest=Manifest(model="model-x", system=text),
                        messages=[{"role": "user", "content": "start"}],
                    )
                )
            else:
                kind = rng.randrange(4)
                if kind == 0:
                    group.append(ToolStarted(at=at, call_id=call_id, name=text))
                elif kind == 1:
                    group.append(ToolResult(at=at, call_id=call_id, ok=True, content=text))
                elif kind == 2:
                    group.append(
                        ModelResponse(
                            at=at,
                            message={"role": "assistant", "content": [{"text": text}]},
                            usage=Usage(input_tokens=counter, output_tokens=len(text)),
                        )
                    )
                else:
                    group.append(
                        Decision(at=at, call_id=call_id, approved=True, by="op", note=text)
                    )
            counter += 1
        groups.append(group)
    return groups


def stamp(events: Sequence[Event], first_seq: int) -> list[AnyEvent]:
    """``events`` with ``seq`` set as a journal appending them at ``first_seq`` would."""
    out: list[AnyEvent] = []
    for i, ev in enumerate(events):
        out.append(msgspec.structs.replace(ev, seq=first_seq + i))  # type: ignore[arg-type]
    return out


def encode_group(events: Sequence[Event]) -> bytes:
    """One group holding ``events`` exactly as given (``seq`` included), as the writer frames it."""
    payloads = [encode_event(ev) for ev in events]
    return build_group([(p, payload_crc(p)) for p in payloads])


def build_sample(run_id: str, groups: Sequence[Sequence[Event]]) -> Sample:
    """Lay out a journal of ``groups`` with the format functions."""
    data = bytearray(encode_header(run_id))
    stamped_groups: list[tuple[AnyEvent, ...]] = []
    starts: list[int] = []
    ends: list[int] = []
    frames: list[Frame] = []
    seq = 0
    for gi, group in enumerate(groups):
        stamped = stamp(group, seq)
        seq += len(stamped)
        start = len(data)
        off = start
        for ev in stamped:
            n = len(encode_event(ev))
            frames.append(Frame(off, off + FRAME_HEADER_SIZE + n, off + frame_size(n), gi))
            off += frame_size(n)
        data += encode_group(stamped)
        assert len(data) == off
        stamped_groups.append(tuple(stamped))
        starts.append(start)
        ends.append(len(data))
    return Sample(
        run_id, bytes(data), tuple(stamped_groups), tuple(starts), tuple(ends), tuple(frames)
    )


async def write_sample(root: pathlib.Path, run_id: str, groups: Sequence[Sequence[Event]]) -> bytes:
    """Write ``groups`` through a ``FileStore`` under ``root`` (one append each); the file's bytes.

    Checks on the way that every append returns the stamped events and moves the journal's
    durable end.
    """
    async with FileStore(root, redact=None, sync_threads=1) as store:
        journal = await store.create(run_id, groups[0])
        for group in groups[1:]:
            seq, before = journal.next_seq, journal.size
            stamped = await journal.append(group)
            assert [ev.seq for ev in stamped] == list(range(seq, seq + len(group)))
            assert journal.size > before
        await journal.aclose()
        return pathlib.Path(store.location(run_id)).read_bytes()


def install(root: pathlib.Path, run_id: str, data: bytes) -> pathlib.Path:
    """Put ``data`` in place as run ``run_id``'s journal in the store at ``root``."""
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{run_id}.journal"
    tmp = runs / f"{run_id}.journal.new"
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def side_files(root: pathlib.Path) -> list[str]:
    """Names in the store's runs directory other than journals (``.torn-*``, ``.broken``...)."""
    runs = root / "runs"
    return sorted(n for n in os.listdir(runs) if not n.endswith(".journal"))


class RecordingFileOps(FileOps):
    """``FileOps`` that records each ``ftruncate``, ``fsync`` and ``fdatasync`` with its fd."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    def ftruncate(self, fd: int, length: int) -> None:
        self.log.append(("ftruncate", fd))
        super().ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        self.log.append(("fsync", fd))
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self.log.append(("fdatasync", fd))
        super().fdatasync(fd)

    def truncations_synced(self) -> bool:
        """Whether every ``ftruncate`` was followed by an ``fsync`` of the same descriptor."""
        for i, (name, fd) in enumerate(self.log):
            if name == "ftruncate" and ("fsync", fd) not in self.log[i + 1 :]:
                return False
        return True
