"""Scanning a journal: verify every frame, fold groups, and classify damage. Pure; no I/O.

The scanner tells three endings apart, like etcd's WAL decoder:

- a clean end: the file ends after the last group, or only zeros (preallocated space) follow;
- a *torn tail*: the last group is incomplete or damaged and no valid frame of a later group
  follows. That group was never acknowledged (its fsync never returned), so dropping it loses
  nothing that was promised;
- *corruption*: damage followed by a valid frame of a later group, or a checksummed frame that
  breaks the rules (undecodable payload, a gap or duplicate in ``seq``). Acknowledged data is at
  stake, so the scanner reports it and never guesses.

Damage is anything a frame fails: its header fields, its checksum, or its zero padding, so that
no byte of a journal can change unnoticed. ``read_group`` and ``later_valid_frame`` also serve
the inbox (``_inbox``), which reads on past damage instead of stopping.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from .._errors import JournalCorruptError, JournalVersionError
from ._format import (
    ALIGN,
    FORMAT_VERSION,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    MAGIC,
    ZERO_PADDING,
    FrameHeader,
    HeaderError,
    decode_header,
    frame_size,
    is_zero,
)
from ._records import AnyEvent, decode_event

_NONZERO = re.compile(rb"[^\x00]")


@dataclass(frozen=True)
class Damage:
    """Where a scan stopped before the end of the file, and why.

    Attributes:
        kind: ``"torn"`` (an unfinished last group, safe to drop) or ``"corrupt"``.
        offset: start of the group that is damaged; valid data ends here.
        at: offset of the first bad frame within that group.
        seq: the sequence number that was expected next.
        reason: what is wrong, in words.
    """

    kind: Literal["torn", "corrupt"]
    offset: int
    at: int
    seq: int
    reason: str


@dataclass
class Scan:
    """What a scan found: the valid events, where they end, and any damage after them."""

    version: int
    run_id: str
    file_size: int
    events: list[AnyEvent] = field(default_factory=list)
    groups: int = 0
    end: int = HEADER_SIZE
    damage: Damage | None = None

    @property
    def last_seq(self) -> int:
        """Sequence number of the last valid event, or -1 for an empty journal."""
        return len(self.events) - 1

    def raise_if_corrupt(self, path: str) -> None:
        """Raise ``JournalCorruptError`` if the damage found is corruption, not a torn tail."""
        if self.damage is not None and self.damage.kind == "corrupt":
            d = self.damage
            raise JournalCorruptError(path, d.at, d.seq, d.reason)


class GroupProblem(Exception):
    """Why the group at some offset cannot be read.

    Attributes:
        at: offset of the first bad frame.
        reason: what is wrong, in words.
        definite: the frames are whole and checksummed but break the rules (an undecodable
            event, a ``seq`` out of order): damage, never a torn write.
        end: for a definite problem, where the group ends (its framing is sound).
    """

    def __init__(
        self, at: int, reason: str, *, definite: bool = False, end: int | None = None
    ) -> None:
        super().__init__(reason)
        self.at = at
        self.reason = reason
        self.definite = definite
        self.end = end


def read_header(
    data: bytes | memoryview,
    path: str,
    expect_run_id: str | None,
    *,
    magic: bytes = MAGIC,
    newest: int = FORMAT_VERSION,
) -> tuple[int, str]:
    """Decode and check the header (a journal's, or with ``magic`` and ``newest`` an inbox's);
    raise the typed error a person can act on."""
    try:
        version, run_id = decode_header(data, magic, newest)
    except HeaderError as exc:
        if exc.version is not None:
            raise JournalVersionError(path, exc.version, newest) from None
        raise JournalCorruptError(path, 0, None, f"bad header: {exc.reason}") from None
    if expect_run_id is not None and run_id != expect_run_id:
        raise JournalCorruptError(
            path, 0, None, f"header names run {run_id!r}, expected {expect_run_id!r}"
        )
    return version, run_id


def scan(data: bytes, path: str, *, expect_run_id: str | None = None) -> Scan:
    """Verify a whole journal held in ``data``.

    Never raises for damage after the header: it is reported in ``Scan.damage`` so that callers
    choose (open raises on corruption and truncates a torn tail, repair salvages, a read-only
    reader of a live journal stops at an in-flight write).

    Raises:
        JournalCorruptError: the header is damaged or names another run.
        JournalVersionError: the file was written by a newer format version.
    """
    version, run_id = read_header(data, path, expect_run_id)
    size = len(data)
    result = Scan(version=version, run_id=run_id, file_size=size)
    pos = HEADER_SIZE
    while pos < size:
        if is_zero(data, pos, min(pos + FRAME_HEADER_SIZE, size)) and is_zero(data, pos, size):
            break  # preallocated space: the end of data
        try:
            group, end = read_group(data, pos, len(result.events))
        except GroupProblem as problem:
            result.damage = _classify(data, pos, len(result.events), problem)
            break
        result.events.extend(group)
        result.groups += 1
        pos = end
    result.end = pos
    return result


def scan_live(
    read: Callable[[], bytes],
    path: str,
    *,
    expect_run_id: str | None = None,
    attempts: int = 5,
    pause: float = 0.01,
) -> Scan:
    """Scan a journal that a writer may be appending to, without its lock (blocking).

    A copy taken while groups land can hold preallocated zeros where one group is about to be
    written and, read a moment later, the next group after them: that looks like corruption
    but is a race. Appends only ever write past the durable end, so real damage stays where it
    is. The file is therefore read again until two reads agree on the damage before it is
    reported as corruption.
    """
    previous: Damage | None = None
    for attempt in range(attempts):
        result = scan(read(), path, expect_run_id=expect_run_id)
        damage = result.damage
        if damage is None or damage.kind == "torn":
            return result
        if previous is not None and (previous.at, previous.reason) == (damage.at, damage.reason):
            return result
        previous = damage
        if attempt + 1 < attempts:
            time.sleep(pause * (attempt + 1))
    return result


def read_group(data: bytes, pos: int, seq: int | None) -> tuple[list[AnyEvent], int]:
    """The events of the group starting at ``pos``, and where it ends.

    Every frame's fields, checksum and padding are checked, and with ``seq`` its events must
    carry contiguous sequence numbers from there (``None``: not checked, as in an inbox).

    Raises:
        GroupProblem: what is wrong with the group, and where.
    """
    size = len(data)
    if size - pos < FRAME_HEADER_SIZE:
        raise GroupProblem(pos, "partial frame header at the end of the file")
    first = FrameHeader(data, pos)
    first_problem = first.problem(pos, size)
    if first_problem is not None:
        raise GroupProblem(pos, first_problem)
    if first.group_off != 0:
        raise GroupProblem(pos, "frame is not the start of a group")
    group_end = pos + first.group_len
    if group_end > size:
        raise GroupProblem(pos, "group runs past the end of the file")
    events: list[AnyEvent] = []
    off = pos
    while off < group_end:
        if group_end - off < FRAME_HEADER_SIZE:
            raise GroupProblem(off, "group ends inside a frame header")
        hdr = FrameHeader(data, off)
        problem = hdr.problem(off, size)
        if problem is None and (hdr.group_off != off - pos or hdr.group_len != first.group_len):
            problem = "frame does not belong to the group it sits in"
        if problem is not None:
            raise GroupProblem(off, problem)
        if not hdr.checksum_ok(data, off):
            raise GroupProblem(off, "checksum mismatch")
        start = off + FRAME_HEADER_SIZE
        stop = start + hdr.length
        following = off + frame_size(hdr.length)
        if stop != following and data[stop:following] != ZERO_PADDING[: following - stop]:
            raise GroupProblem(off, "non-zero padding after the payload")
        try:
            event = decode_event(memoryview(data)[start:stop])
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise GroupProblem(
                off, f"undecodable event: {exc}", definite=True, end=group_end
            ) from None
        if seq is not None and event.seq != seq + len(events):
            expected = seq + len(events)
            kind = "duplicate" if event.seq < expected else "gap"
            raise GroupProblem(
                off,
                f"seq {event.seq} where {expected} was expected ({kind})",
                definite=True,
                end=group_end,
            )
        events.append(event)
        off = following
    if off != group_end:
        raise GroupProblem(off, "frames overrun their group")
    return events, group_end


def _classify(data: bytes, pos: int, seq: int, problem: GroupProblem) -> Damage:
    if problem.definite:
        return Damage("corrupt", pos, problem.at, seq, problem.reason)
    later = later_valid_frame(data, pos, problem.at)
    if later is None:
        return Damage("torn", pos, problem.at, seq, problem.reason)
    reason = f"{problem.reason}; a valid frame of a later group follows at offset {later}"
    return Damage("corrupt", pos, problem.at, seq, reason)


def later_valid_frame(data: bytes, group_start: int, bad: int) -> int | None:
    """Offset of the first valid frame after ``bad`` that starts a group after ``group_start``.

    Valid frames of the damaged group itself (a torn write persisted out of order) are skipped:
    they say nothing about acknowledged data.
    """
    size = len(data)
    y = bad + ALIGN
    while y + FRAME_HEADER_SIZE <= size:
        match = _NONZERO.search(data, y)
        if match is None:
            return None
        # A valid header is never all zeros, so it starts at most 15 bytes before a nonzero byte.
        y = max(y, (match.start() - (FRAME_HEADER_SIZE - 1)) & ~(ALIGN - 1))
        if y + FRAME_HEADER_SIZE > size:
            return None
        hdr = FrameHeader(data, y)
        if hdr.problem(y, size) is None and hdr.checksum_ok(data, y):
            if y - hdr.group_off > group_start:
                return y
            y += frame_size(hdr.length)
            continue
        y += ALIGN
    return None
