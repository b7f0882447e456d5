"""A run's inbox: answers for a run whose journal another process holds.

A person's decision, resolution or cancellation is normally appended to the run's journal under
its lock. While a worker advances the run it holds that lock, so the answer goes to
``runs/<run_id>.inbox`` instead: one JSON-encoded event per line, appended under the inbox's own
``flock`` and fsync'd. The owner folds the inbox into the journal at its next pause (checking
each answer against the run's state, so an answer delivered twice is ignored) and then removes
it; a sweeping supervisor picks up a parked run whose inbox is not empty.
"""

from __future__ import annotations

import fcntl
import os

import msgspec

from ._file import FileOps
from ._records import AnyEvent, Event

_ENCODER = msgspec.json.Encoder()
_DECODER: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)


def inbox_path(runs_dir: str, run_id: str) -> str:
    return os.path.join(runs_dir, f"{run_id}.inbox")


def post(path: str, event: Event, ops: FileOps) -> None:
    """Append ``event`` to the inbox at ``path`` durably (blocking)."""
    created = not os.path.exists(path)
    fd = ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        ops.write_all(fd, _ENCODER.encode(event) + b"\n", ops.size(fd))
        ops.fsync(fd)
    finally:
        ops.close(fd)
    if created:
        ops.fsync_dir(os.path.dirname(path))


def take(path: str, ops: FileOps) -> list[AnyEvent]:
    """The inbox's events, oldest first; a line cut short by a crash is skipped (blocking)."""
    try:
        fd = ops.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        data = ops.read_all(fd)
    finally:
        ops.close(fd)
    events: list[AnyEvent] = []
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is unfinished
        try:
            events.append(_DECODER.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return events


def clear(path: str, count: int, ops: FileOps) -> None:
    """Remove the first ``count`` events taken from the inbox; keep any posted since (blocking)."""
    try:
        fd = ops.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        lines = ops.read_all(fd).split(b"\n")
        rest = b"".join(line + b"\n" for line in lines[count:-1])
        if rest:
            ops.ftruncate(fd, 0)
            ops.write_all(fd, rest, 0)
            ops.fsync(fd)
        else:
            ops.unlink(path)
    finally:
        ops.close(fd)
    if not rest:
        ops.fsync_dir(os.path.dirname(path))
