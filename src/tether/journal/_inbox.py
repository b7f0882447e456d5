"""A run's inbox: answers for a run whose journal another process holds.

A person's decision, resolution or cancellation is normally appended to the run's journal under
its lock. While a worker advances the run it holds that lock, so the answer goes to
``runs/<run_id>.inbox`` instead. The owner folds the inbox into the journal at its next pause
(checking each answer against the run's state, so an answer delivered twice is ignored) and then
clears it; a sweeping supervisor picks up a parked run whose inbox is not empty.

File layout, the journal's own (``_format``), so that a queued answer is kept as safely as a
recorded one::

    header (256 bytes)   a journal header with magic b"TETHERI\\0" and INBOX_VERSION,
                         naming the run
    record*              one group of one frame per answer: crc, length, group_off (0),
                         group_len, the event as MessagePack, zero padding to 8 bytes

An answer is stored as it was posted (its ``seq`` is -1: the owner stamps it when it appends it
to the journal), so the inbox holds whatever events the vocabulary has. Records are checked as a
journal's groups are (``_reader.read_group``): fields, checksum and padding.

What each operation promises:

- ``post`` takes the inbox's exclusive ``flock`` and reads it. A torn tail (a post cut short by
  a crash or a full disk) is first cut back to the end of the last whole record, durably
  (its bytes kept in ``<inbox>.torn-<offset>``, the truncation fsync'd), so that a new record
  never lands glued to a broken one. The record is acknowledged only once its bytes are
  fsync'd, and for a new file the directory too. A write that fails is cut back again (best
  effort, and the fsync is never retried) and raises ``JournalIOError``: nothing is
  acknowledged, and what the inbox held before is still there.
- ``take`` (under a shared lock) returns every record that can be read, oldest first. Damage
  in the middle (a bad record with a good one after it) is logged, naming the file, offset and
  reason, and reading goes on after it: one bad record never hides the answers behind it.
- ``clear`` replaces the inbox atomically: the records that remain (all but the first
  ``count``, so anything posted since stays) are written to a temporary file, fsync'd, renamed
  over the inbox, and the directory fsync'd; with none left, the inbox is removed and the
  directory fsync'd. A crash at any point leaves the old inbox or the new one, each whole, and
  the owner's check against the run's state ignores answers it finds again. An inbox with
  damage is first copied whole to ``<inbox>.broken`` (``.1``, ``.2``... if taken), and the
  error logged, so that the unreadable bytes are kept for a person.

Why a replace rather than an append-only "consumed" marker: an inbox is small and short-lived
(cleared at the owner's next pause), rewriting it costs one small file, and the file then holds
exactly the answers still due, so whether a run has answers waiting stays a plain existence
check, and no reader has to trust a marker to know what it may skip.

Every operation checks, once it holds the lock, that the path still names the file it locked:
``clear`` replaces or removes the file under that lock, and a post that was waiting for the lock
of the old file must not write into it (the answer would go with that file).

An inbox of JSON lines, as tether wrote before this layout, is still read, and rewritten in this
layout by the next post or clear.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from .._errors import JournalCorruptError, JournalIOError, RecordTooLargeError
from ._file import FileOps
from ._format import (
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    MAX_PAYLOAD,
    FrameHeader,
    build_group,
    encode_header,
    is_zero,
    payload_crc,
)
from ._leftovers import free_name, keep_torn_tail, save_copy
from ._reader import GroupProblem, later_valid_frame, read_group, read_header
from ._records import AnyEvent, Event
from ._stamp import queueable

INBOX_MAGIC = b"TETHERI\x00"
PATIENCE = 10.0
"""Seconds a post waits for the inbox's lock (another post, or its holder taking it in)."""
POLL = 0.005
INBOX_VERSION = 1

log = logging.getLogger("tether.journal")

_LEGACY_DECODER: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)


def inbox_path(runs_dir: str, run_id: str) -> str:
    return os.path.join(runs_dir, f"{run_id}.inbox")


def inbox_header(run_id: str) -> bytes:
    """The 256-byte header of ``run_id``'s inbox."""
    return encode_header(run_id, INBOX_VERSION, INBOX_MAGIC)


def frame_record(event: Event, where: str = "") -> bytes:
    """``event`` as one inbox record (a group of one frame).

    Raises:
        RecordTooLargeError: the journal could not hold the event once its holder records it.
    """
    payload = queueable(event, where)
    return build_group([(payload, payload_crc(payload))])


@dataclass(frozen=True)
class Record:
    """One readable answer in an inbox: the event and the record's bytes as found."""

    event: AnyEvent
    raw: bytes


@dataclass
class InboxScan:
    """What an inbox holds.

    Attributes:
        records: every record that can be read, oldest first.
        end: where the next record goes: after the last whole record (0 when not even the
            header is whole, which only a first post cut short leaves).
        damage: ``(offset, reason)`` of each stretch that cannot be read, oldest first.
        legacy: the file holds JSON lines (an older tether's inbox).
    """

    size: int
    records: list[Record] = field(default_factory=list)
    end: int = 0
    damage: list[tuple[int, str]] = field(default_factory=list)
    legacy: bool = False

    @property
    def events(self) -> list[AnyEvent]:
        return [r.event for r in self.records]


def scan_inbox(data: bytes, path: str, run_id: str) -> InboxScan:
    """Read an inbox held in ``data``: every record that can be read, and where damage lies.

    Never raises for damage: it is reported in ``damage``, and reading goes on at the next
    valid record after it. A torn tail (an unfinished last record, or zeros) ends the records.

    Raises:
        JournalVersionError: the inbox was written by a newer tether.
    """
    if data[:1] == b"{":
        return _scan_legacy(data)
    result = InboxScan(size=len(data))
    if len(data) < HEADER_SIZE:
        if data[: len(INBOX_MAGIC)] != INBOX_MAGIC[: len(data)]:  # not even the magic: no inbox
            result.damage.append((0, f"not an inbox ({len(data)} bytes, no header)"))
        return result  # else a first post cut short: nothing in it was acknowledged
    try:
        read_header(data, path, run_id, magic=INBOX_MAGIC, newest=INBOX_VERSION)
    except JournalCorruptError as exc:  # the records after it can still be read
        result.damage.append((0, exc.reason))
    pos, size = HEADER_SIZE, len(data)
    while pos < size:
        if is_zero(data, pos, min(pos + FRAME_HEADER_SIZE, size)) and is_zero(data, pos, size):
            break  # zeros where a record was to go: a torn tail (cut by the next post)
        try:
            events, end = read_group(data, pos, None)
        except GroupProblem as problem:
            if problem.end is not None:  # whole and checksummed, but no event this tether reads
                result.damage.append((pos, problem.reason))
                pos = problem.end
                continue
            whole = oversized_end(data, pos)
            if whole is not None:  # acknowledged by an older tether, which did not check
                result.damage.append(
                    (pos, f"{problem.reason}: a whole answer the journal cannot hold")
                )
                pos = whole
                continue
            later = later_valid_frame(data, pos, problem.at)
            if later is None:
                break  # a torn tail: never acknowledged
            after = later - FrameHeader(data, later).group_off
            result.damage.append((pos, f"{problem.reason}; a valid record follows at {after}"))
            pos = after
            continue
        if len(events) == 1:
            result.records.append(Record(events[0], data[pos:end]))
        else:
            result.damage.append((pos, f"a record of {len(events)} events, not one"))
        pos = end
    result.end = pos
    return result


def oversized_end(data: bytes, pos: int) -> int | None:
    """Where the record at ``pos`` ends, if it is one whole, checksummed frame whose payload
    is over the frame limit (which only an older tether wrote), else ``None``.

    Such a record is not a torn tail: it was acknowledged, so it is reported as damage (logged,
    and kept in the inbox's ``.broken`` copy) instead of being cut off as if never written.
    """
    if len(data) - pos < FRAME_HEADER_SIZE:
        return None
    header = FrameHeader(data, pos)
    end: int = pos + header.group_len
    if (
        header.length <= MAX_PAYLOAD
        or header.group_off != 0
        or header.group_len < FRAME_HEADER_SIZE + header.length
        or end > len(data)
        or not header.checksum_ok(data, pos)
    ):
        return None
    return end


def _scan_legacy(data: bytes) -> InboxScan:
    result = InboxScan(size=len(data), legacy=True, end=len(data))
    pos = 0
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is unfinished
        try:
            event = _LEGACY_DECODER.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            result.damage.append((pos, f"undecodable line: {exc}"))
        else:
            try:
                result.records.append(Record(event, frame_record(event)))
            except RecordTooLargeError as exc:
                result.damage.append((pos, f"an answer the journal cannot hold: {exc.reason}"))
        pos += len(line) + 1
    return result


def post(path: str, run_id: str, event: Event, ops: FileOps) -> None:
    """Append ``event`` to the inbox at ``path``; return once it is durable (blocking).

    Raises:
        RecordTooLargeError: the answer is larger than a journal frame (nothing is written).
        JournalIOError: the inbox could not be written (a full disk, say, or ``path`` is a
            symbolic link: nothing is ever written through one); the answer was not queued,
            and the inbox holds what it held before.
        JournalVersionError: the inbox was written by a newer tether.
    """
    post_chosen(path, run_id, lambda _: event, ops)


def post_chosen(
    path: str, run_id: str, choose: Callable[[list[AnyEvent]], Event | None], ops: FileOps
) -> Event | None:
    """Append the event ``choose`` picks, given the answers the inbox at ``path`` holds, under
    the inbox's exclusive lock (blocking): nothing else is posted to it between what
    ``choose`` saw and the append, so two answers given at once are judged one against the
    other. ``choose`` refuses by raising (nothing is written) or gives ``None`` to post
    nothing. Returns what was posted, once it is durable.

    Raises:
        whatever ``choose`` raises; RecordTooLargeError, JournalIOError, JournalVersionError:
        as ``post``.
    """
    try:
        with _locked(path, ops, exclusive=True, create=True, patience=PATIENCE) as fd:
            assert fd is not None
            data = ops.read_all(fd)
            found = scan_inbox(data, path, run_id)
            _report(path, found)
            try:
                event = choose(found.events)
                record = None if event is None else frame_record(event, path)
            except BaseException:
                _drop_if_new(fd, path, data, ops)
                raise
            if record is None:
                _drop_if_new(fd, path, data, ops)
                return None
            if found.legacy:
                _replace(path, run_id, [*(r.raw for r in found.records), record], ops)
                return event
            end = found.end
            if end < len(data):  # a torn tail: cut back to the last whole record first, durably
                kept = keep_torn_tail(path, data, end, ops)
                if kept is not None:  # (zeros alone are a post that never began to write)
                    log.warning(
                        "%s: %d bytes after its last whole answer do not read as one (a post "
                        "cut short, or an answer damaged after it was queued): cut off, kept "
                        "in %s",
                        path,
                        len(data) - end,
                        kept,
                    )
                ops.ftruncate(fd, end)
                ops.fsync(fd)
            _append(fd, path, run_id, record, end, ops)
            return event
    except OSError as exc:
        raise JournalIOError(path, "queue an answer in the inbox", exc) from exc


@dataclass(frozen=True)
class Held:
    """A run's inbox, locked as a post locks it, for its journal's holder to append an answer
    while nothing can be queued (``hold``, then ``let_go``).

    Attributes:
        fd: the inbox, open and ``flock``'d (closing it lets the lock go).
        data: what the inbox held when it was locked (``b""``: it was made to be locked).
        waiting: the answers it holds, oldest first.
    """

    path: str
    fd: int
    data: bytes
    waiting: list[AnyEvent]


def hold(path: str, run_id: str, ops: FileOps) -> Held:
    """Lock the inbox at ``path`` as a post does (made empty if there is none, so that a post
    for the run waits for it too; given up after ``PATIENCE``), and read it (blocking).

    Raises:
        JournalIOError: the inbox could not be locked or read (nothing is held).
        JournalVersionError: the inbox was written by a newer tether (nothing is held).
    """
    try:
        fd = _lock(path, ops, exclusive=True, create=True, patience=PATIENCE)
        assert fd is not None
        try:
            data = ops.read_all(fd)
            found = scan_inbox(data, path, run_id)
        except BaseException:
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size == 0:
                    ops.unlink(path)
            ops.close(fd)
            raise
    except OSError as exc:
        raise JournalIOError(path, "lock the inbox", exc) from exc
    _report(path, found)
    return Held(path, fd, data, found.events)


def let_go(held: Held, ops: FileOps) -> None:
    """Let the inbox ``hold`` locked go; one it made for the lock, still empty, is removed
    first (under the lock: a post waiting for it sees it gone and opens it anew). One a
    killed process leaves behind holds nothing: it reads as no inbox (``empty``), and the
    next post writes into it, or the next clear removes it."""
    try:
        with contextlib.suppress(OSError):  # only tidiness is lost: an empty inbox is none
            _drop_if_new(held.fd, held.path, held.data, ops)
    finally:
        ops.close(held.fd)


def empty(st: os.stat_result) -> bool:
    """Whether an inbox of this ``stat`` holds no answer for certain: a file of no bytes,
    made to be locked (``hold``) or by a post that wrote nothing, and left by a process
    killed before it removed it. Whoever looks for answers waiting passes over it."""
    return st.st_size == 0


def still_queueing(patience: float) -> OSError:
    """What an answer that waited ``patience`` seconds for a run's inbox is refused with."""
    return OSError(
        errno.ETIMEDOUT, f"another answer was still being queued after {patience:g} s; try again"
    )


def _drop_if_new(fd: int, path: str, data: bytes, ops: FileOps) -> None:
    """Remove the inbox a post that wrote nothing created (under its lock: a poster waiting
    for it sees it gone and opens it anew)."""
    if not data and os.fstat(fd).st_size == 0:
        ops.unlink(path)


def _append(fd: int, path: str, run_id: str, record: bytes, end: int, ops: FileOps) -> None:
    new = end == 0
    data = inbox_header(run_id) + record if new else record
    try:
        ops.write_all(fd, data, end)
        ops.fsync(fd)
    except OSError:
        # Leave no part of an unacknowledged record behind for a later post to trip over
        # (best effort; the fsync is not retried: what a failed one leaves is unknown).
        with contextlib.suppress(OSError):
            if new:
                ops.unlink(path)  # under the lock: a waiting poster sees it gone and retries
            else:
                ops.ftruncate(fd, end)
        raise
    if new:
        ops.fsync_dir(os.path.dirname(path))


def take(path: str, run_id: str, ops: FileOps) -> list[AnyEvent]:
    """The inbox's events, oldest first: every record that can be read (blocking).

    Damage in the middle is logged and read past; a torn tail is left for the next post.

    Raises:
        JournalIOError: the inbox exists but cannot be read.
        JournalVersionError: the inbox was written by a newer tether.
    """
    try:
        with _locked(path, ops, exclusive=False, create=False) as fd:
            if fd is None:
                return []
            data = ops.read_all(fd)
    except OSError as exc:
        raise JournalIOError(path, "read the inbox", exc) from exc
    found = scan_inbox(data, path, run_id)
    _report(path, found)
    return found.events


def clear(path: str, run_id: str, count: int, ops: FileOps) -> None:
    """Remove the first ``count`` events taken from the inbox; keep any posted since (blocking).

    Raises:
        JournalIOError: the inbox could not be rewritten; it is as it was.
        JournalVersionError: the inbox was written by a newer tether.
    """
    try:
        with _locked(path, ops, exclusive=True, create=False) as fd:
            if fd is None:
                return
            data = ops.read_all(fd)
            found = scan_inbox(data, path, run_id)
            if found.damage:
                kept = free_name(f"{path}.broken")
                save_copy(kept, data, ops)
                _report(path, found, f"; the whole inbox is kept in {kept}")
            rest = [r.raw for r in found.records[count:]]
            if rest:
                _replace(path, run_id, rest, ops)
            else:
                ops.unlink(path)  # under the lock: a waiting poster sees it gone and retries
                ops.fsync_dir(os.path.dirname(path))
    except OSError as exc:
        raise JournalIOError(path, "clear the inbox", exc) from exc


def _report(path: str, found: InboxScan, more: str = "") -> None:
    for offset, reason in found.damage:
        log.error("%s: damaged at offset %d, read past it: %s%s", path, offset, reason, more)


@contextlib.contextmanager
def _locked(
    path: str, ops: FileOps, *, exclusive: bool, create: bool, patience: float | None = None
) -> Iterator[int | None]:
    """The inbox at ``path``, open and ``flock``'d, checked to still be the file the path
    names once the lock is held; ``None`` if there is no inbox (and not ``create``). With
    ``patience`` (exclusive only), the lock is tried every ``POLL`` seconds and given up after
    that many (``OSError`` ``ETIMEDOUT``): a post that another keeps waiting (a process
    stopped while it held the inbox) must not hold its thread for ever."""
    fd = _lock(path, ops, exclusive=exclusive, create=create, patience=patience)
    try:
        yield fd
    finally:
        if fd is not None:
            ops.close(fd)


def _lock(
    path: str, ops: FileOps, *, exclusive: bool, create: bool, patience: float | None
) -> int | None:
    """``_locked``'s descriptor, for the caller to close (which lets the lock go)."""
    flags = os.O_RDWR | (os.O_CREAT if create else 0) if exclusive else os.O_RDONLY
    deadline = None if patience is None else time.monotonic() + patience
    while True:
        try:
            fd = ops.open(path, flags)
        except FileNotFoundError:
            return None
        try:
            if patience is None or deadline is None or not exclusive:
                ops.wait_lock(fd, shared=not exclusive)
            else:
                while not ops.lock(fd):
                    if time.monotonic() >= deadline:
                        raise still_queueing(patience)
                    time.sleep(POLL)
            if ops.same_file(fd, path):
                return fd
        except BaseException:
            ops.close(fd)
            raise
        ops.close(fd)
        # Replaced or removed while we waited: the lock we got guards nothing any more.


def _replace(path: str, run_id: str, records: list[bytes], ops: FileOps) -> None:
    """Make ``records`` the inbox's content atomically (called under the inbox's lock)."""
    folder, name = os.path.split(path)
    # A leading dot and ".tmp": a store's start removes it if a crash leaves it behind.
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        ops.unlink(tmp)  # left by a killed process of the same pid and thread id
    fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # never through a planted link
    try:
        try:
            ops.write_all(fd, inbox_header(run_id) + b"".join(records), 0)
            ops.fsync(fd)
        finally:
            ops.close(fd)
        ops.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            ops.unlink(tmp)
        raise
    ops.fsync_dir(folder)
