"""Finished runs' summaries kept on disk, so that a listing of a store does not fold every
journal again in every process: ``tether runs`` and the console share one file.

A finished run's journal does not change any more, and neither does its summary (who holds it
aside, which is looked up afresh). The file holds, for each run that had finished when it was
summarized, the summary and the journal's identity: size, modification time, inode and
change time. An entry is used only while the journal's ``stat`` gives exactly those four: an
append, a repair, a journal removed and made again under the same id, even one rewritten and
its modification time set back (which sets the change time, which nobody can set), each
changes one of them. An entry is written only for a journal whose times were older than the
read by more than ``RACY_NS`` (two writes within one tick of the kernel's clock can leave the
same times; see ``_listing``), and never for one on a filesystem whose times are coarser than
a millisecond (``Identity.coarse``), where a tick is longer than that window.

A file that can be wrong is ignored whole: it starts with a magic number, a format version
and a CRC-32 of the rest, and names the tether version and the source of the modules that
make a summary (a changed summary function never reads what an older one wrote). Anything
that does not check out, a torn write, a file of another tether, one that is not a regular
file, is as if there were none; the next listing writes a new one. It is written next to
``runs/`` through a temporary file renamed over it (owner-only, as the store's files), by
whoever has the right to write there; a listing that may not write simply does not keep it.

Layout of ``<root>/summaries.cache``::

    magic    8 bytes  b"TETHERS\\0"
    format   u32      FORMAT
    crc      u32      CRC-32 of the body
    body     MessagePack: {"tether": version, "source": fingerprint,
                           "runs": {run_id: [size, mtime_ns, ino, ctime_ns, summary]}}
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
import sys
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import msgspec

from .._version import __version__
from ._summary import Question, Rest, RunSummary

NAME = "summaries.cache"
MAGIC = b"TETHERS\x00"
FORMAT = 1
MAX_SIZE = 256 * 1024 * 1024
"""A larger file is not read (a store of a million runs keeps about 300 MiB)."""

_HEADER = struct.Struct("<8sII")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # no symlink followed, no FIFO waited on
_SUMMARY_FIELDS = [f.name for f in fields(RunSummary) if f.name not in ("state", "held_by")]
_SOURCES = (
    "tether.operate._summary",
    "tether.operate._summary_file",
    "tether.supervisor._state",
    "tether.supervisor._status",
    "tether.journal._records",
)


@dataclass(frozen=True, slots=True)
class Identity:
    """What says a journal is the one a kept summary was made from."""

    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int

    @property
    def coarse(self) -> bool:
        """Whether the journal's filesystem keeps times in whole milliseconds or coarser (FAT,
        some network filesystems): there a rewrite within one tick leaves the same identity,
        so such a journal's summary is never kept (on a filesystem of nanoseconds, one journal
        in a million is skipped by chance, and only read again)."""
        return self.ctime_ns % 1_000_000 == 0 and self.mtime_ns % 1_000_000 == 0


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    """The file's body, as ``dump`` writes it (decoded with every type checked)."""

    tether: str
    source: int
    runs: dict[str, tuple[int, int, int, int, list[Any]]]


def fingerprint() -> int:
    """A CRC-32 of the source of the modules that make a summary (``_SOURCES``): another
    summary function, another fingerprint."""
    crc = zlib.crc32(__version__.encode())
    for name in _SOURCES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                crc = zlib.crc32(f.read(), crc)
        except OSError:
            continue
    return crc


def cache_path(root: str) -> str:
    return os.path.join(root, NAME)


def load(root: str) -> dict[str, tuple[Identity, RunSummary]]:
    """The kept summaries of the store at ``root``, each with its journal's identity; an empty
    dict when there is no file, or one that does not check out (blocking)."""
    try:
        fd = os.open(cache_path(root), os.O_RDONLY | _OPEN_FLAGS)  # a FIFO there: no wait
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIZE:
            return {}
        chunks = []
        while chunk := os.read(fd, st.st_size + 1):
            chunks.append(chunk)
        data = b"".join(chunks)
    except OSError:
        return {}
    finally:
        os.close(fd)
    return parse(data)


def parse(data: bytes) -> dict[str, tuple[Identity, RunSummary]]:
    """What ``data`` (a whole file) keeps, or an empty dict if anything does not check out."""
    if len(data) < _HEADER.size:
        return {}
    magic, version, crc = _HEADER.unpack_from(data)
    body = memoryview(data)[_HEADER.size :]
    if magic != MAGIC or version != FORMAT or zlib.crc32(body) != crc:
        return {}
    try:
        doc = msgspec.msgpack.decode(body, type=_Body)
        if doc.tether != __version__ or doc.source != fingerprint():
            return {}
        return {
            run_id: (Identity(size, mtime_ns, ino, ctime_ns), _summary(run_id, fields_))
            for run_id, (size, mtime_ns, ino, ctime_ns, fields_) in doc.runs.items()
        }
    except (msgspec.DecodeError, TypeError, ValueError):  # ValidationError is a DecodeError
        return {}


def dump(kept: Mapping[str, tuple[Identity, RunSummary]]) -> bytes:
    """The file that keeps ``kept``."""
    runs = {
        run_id: [ident.size, ident.mtime_ns, ident.ino, ident.ctime_ns, _fields(summary)]
        for run_id, (ident, summary) in kept.items()
    }
    body = msgspec.msgpack.encode({"tether": __version__, "source": fingerprint(), "runs": runs})
    return _HEADER.pack(MAGIC, FORMAT, zlib.crc32(body)) + body


def save(root: str, kept: Mapping[str, tuple[Identity, RunSummary]]) -> bool:
    """Write ``kept`` as the store's file (blocking); ``False`` when it could not be written
    (no right to write there, a full disk, another process writing it right now)."""
    path = cache_path(root)
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | _OPEN_FLAGS, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one writer at a time
        except OSError:
            return False
        if not _still_named(fd, tmp):
            return False  # renamed over the file by the writer before: writing it would tear it
        data = dump(kept)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.replace(tmp, path)  # under the lock: no other writer renames a half-written file
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    finally:
        os.close(fd)
    return True


def _still_named(fd: int, path: str) -> bool:
    """Whether ``path`` is still the regular file open as ``fd``."""
    try:
        mine, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(mine.st_mode) and (mine.st_dev, mine.st_ino) == (
        named.st_dev,
        named.st_ino,
    )


def _fields(summary: RunSummary) -> list[Any]:
    values = []
    for name in _SUMMARY_FIELDS:
        value = getattr(summary, name)
        if name in ("questions", "rests"):
            value = [_plain(v) for v in value]
        values.append(value)
    return values


def _plain(item: Question | Rest) -> dict[str, Any]:
    return {f.name: getattr(item, f.name) for f in fields(item)}


def _summary(run_id: str, values: list[Any]) -> RunSummary:
    """The summary ``values`` (as ``_fields`` wrote them) make, every field of the type the
    summary declares (``msgspec.ValidationError`` if one is not: a file made by hand)."""
    given = dict(zip(_SUMMARY_FIELDS, values, strict=True))
    if given["run_id"] != run_id:
        raise ValueError("an entry under another run's id")
    return msgspec.convert(given, RunSummary)
