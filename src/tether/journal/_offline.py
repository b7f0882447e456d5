"""Journal files by path, for people: verify, dump and repair (the ``tether journal`` commands)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import msgspec

from .._errors import InvalidRunIdError, JournalLockedError
from ._file import DEFAULT_FILE_OPS, FileOps
from ._format import ALIGN, FRAME_HEADER_SIZE, FrameHeader, align
from ._leftovers import free_name, save_copy
from ._reader import Scan, scan, scan_live
from ._records import AnyEvent, RunFinished, decode_event
from ._runid import check_run_id


def read_file(path: str, ops: FileOps = DEFAULT_FILE_OPS) -> bytes:
    # A path a person named: a link to a journal is read where it points.
    fd = ops.open(os.path.realpath(path), os.O_RDONLY)
    try:
        return ops.read_all(fd)
    finally:
        ops.close(fd)


def verify_file(path: str, ops: FileOps = DEFAULT_FILE_OPS) -> Scan:
    """Scan the journal at ``path`` without locking or changing it.

    Returns the scan; a torn tail is reported in ``Scan.damage`` (opening would truncate it).

    Raises:
        JournalCorruptError: damage followed by valid data, or a damaged header.
        JournalVersionError: written by a newer format.
        FileNotFoundError: no such file.
    """
    result = scan_live(lambda: read_file(path, ops), path, expect_run_id=store_run_id(path))
    result.raise_if_corrupt(path)
    return result


def store_run_id(path: str) -> str | None:
    """The run a journal at ``path`` must hold where it lies in a store (``runs/ID.journal``,
    named as a store names it), so that verify sees what the store sees (a journal copied or
    renamed there is corrupt to it); ``None`` for a journal anywhere else (a copy to look at)."""
    # As named (a store whose runs/ is a link elsewhere), else where it really is.
    inside = [p for p in (os.path.abspath(path), os.path.realpath(path)) if _in_runs(p)]
    if not inside:
        return None
    stem, dot, ext = os.path.basename(inside[0]).rpartition(".")
    if not dot or ext != "journal":
        return None
    try:
        check_run_id(stem)
    except InvalidRunIdError:
        return None
    return stem


def _in_runs(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)) == "runs"


@dataclass(frozen=True)
class RepairReport:
    """What ``repair_file`` found and did."""

    path: str
    events_kept: int
    end: int
    bytes_removed: int
    moved_to: str | None
    reason: str | None
    changed: bool
    unfinishes: bool = False
    """The cut removes the record of the run's end: the run becomes resumable again."""


def _finishes(events: list[AnyEvent]) -> bool:
    return any(isinstance(e, RunFinished) for e in events)


def _finished_in(data: bytes, start: int) -> bool:
    """Whether a frame from ``start`` on that still checks out records the run's end.

    What repair cuts off is damaged somewhere, but a ``run_finished`` frame in it may be
    intact: every aligned offset is tried as a frame, and its payload decoded if its checksum
    holds.
    """
    pos = align(start)
    while pos + FRAME_HEADER_SIZE <= len(data):
        header = FrameHeader(data, pos)
        if header.problem(pos, len(data)) is None and header.checksum_ok(data, pos):
            begin = pos + FRAME_HEADER_SIZE
            try:
                event = decode_event(data[begin : begin + header.length])
            except (msgspec.DecodeError, msgspec.ValidationError):
                event = None
            if isinstance(event, RunFinished):
                return True
        pos += ALIGN
    return False


def repair_file(path: str, *, apply: bool, ops: FileOps = DEFAULT_FILE_OPS) -> RepairReport:
    """Cut the journal at ``path`` back to its last good group.

    Everything after the last good group (damaged or not) is first copied to a ``.broken`` file
    beside the journal and fsync'd; then the journal is truncated and fsync'd. With
    ``apply=False`` nothing is changed and the report says what would be.

    Raises:
        JournalLockedError: a writer holds the journal.
        JournalCorruptError: the header itself is damaged (nothing to keep).
        JournalVersionError: written by a newer format.
    """
    fd = ops.open(os.path.realpath(path), os.O_RDWR)  # a path a person named
    try:
        if not ops.lock(fd):
            raise JournalLockedError(path)
        data = ops.read_all(fd)
        result = scan(data, path)
        tail = data[result.end :]
        removed = len(tail)
        reason = result.damage.reason if result.damage else None
        if not tail.strip(b"\x00"):
            tail = b""
        # Beside the journal itself (through a link too), where gc finds it with its run.
        moved_to = free_name(f"{os.path.realpath(path)}.broken") if tail else None
        if apply and removed:
            if moved_to is not None:
                save_copy(moved_to, tail, ops)
            ops.ftruncate(fd, result.end)
            ops.fsync(fd)
        return RepairReport(
            path=path,
            events_kept=len(result.events),
            end=result.end,
            bytes_removed=removed,
            moved_to=moved_to,
            reason=reason,
            changed=apply and removed > 0,
            unfinishes=not _finishes(result.events) and _finished_in(data, result.end),
        )
    finally:
        ops.close(fd)
