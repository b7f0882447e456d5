"""The journal file format: a header, then groups of checksummed frames. Pure; no I/O.

File layout::

    header (256 bytes)
        magic          8 bytes   b"TETHERJ\\0"
        version        u16       FORMAT_VERSION
        flags          u16       0 (reserved)
        run_id_len     u16
        reserved       u16
        run_id         bytes     ASCII, zero padded up to byte 252
        crc            u32       CRC-32 of bytes [0, 252)
    group*                       one group per write, laid end to end
    zeros*                       preallocated space not yet written (the end of data)

Each *frame* holds one event and starts at an 8-byte aligned offset::

    crc        u32   CRC-32 of the payload, continued over the next 12 header bytes
    length     u32   payload length in bytes (not counting padding)
    group_off  u32   this frame's offset from the start of its group
    group_len  u32   total size of the group this frame belongs to, padding included
    payload    MessagePack of one event, then zero padding to the next multiple of 8

Why these fields:

- The checksum covers the length and group fields, so a flipped length can never be trusted: a
  reader bounds every length by the bytes left in the file and by ``MAX_PAYLOAD`` before it looks
  at a payload, and never allocates on a length's say-so.
- A group is what one ``append`` (or one coalesced write of several appends) produced. It is
  atomic on recovery: a group whose frames are not all present and valid is dropped whole. Every
  frame names its group's start (``offset - group_off``), so a valid frame found *after* a damaged
  spot tells whether it belongs to the same unfinished group (a torn tail) or to a later group
  (corruption in the middle of the file).
- 8-byte alignment keeps every 16-byte frame header inside one 512-byte sector, so a torn sector
  write cannot leave half a header that happens to look valid.
- A frame header of all zeros is never valid (``length`` is at least 1), which is how a reader
  recognises the preallocated, zero-filled space after the last group.
- Padding lies outside the checksum, so a reader checks that it is zero (at most 7 bytes a
  frame): every byte of a journal is then checked by something, and a flipped padding byte is
  damage like any other instead of passing unseen.

The same header (with its own magic) and frames lay out a run's inbox (``_inbox``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

MAGIC = b"TETHERJ\x00"
FORMAT_VERSION = 1
HEADER_SIZE = 256
MAX_RUN_ID_LEN = 128
"""The longest run id, in characters (``check_run_id`` refuses a longer one)."""

FRAME_HEADER_SIZE = 16
ALIGN = 8
MAX_PAYLOAD = 32 * 1024 * 1024
"""Largest encoded event; larger payloads belong in the blob store."""
MAX_GROUP = 1 << 31

_HEADER_FIXED = struct.Struct("<8sHHHH")
_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<IIII")
_FRAME_TAIL = struct.Struct("<III")
_HEADER_CRC_AT = HEADER_SIZE - 4
ZERO_PADDING = bytes(ALIGN)
"""The most padding a frame has, as written: a reader compares a frame's padding with it."""


def crc32(data: bytes | memoryview, start: int = 0) -> int:
    """CRC-32 (zlib's, hardware assisted where zlib is), continuable from ``start``."""
    return zlib.crc32(data, start)


def align(n: int) -> int:
    """Round ``n`` up to the frame alignment."""
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def frame_size(payload_len: int) -> int:
    """Bytes one frame with a payload of ``payload_len`` takes on disk."""
    return FRAME_HEADER_SIZE + align(payload_len)


def encode_header(run_id: str, version: int = FORMAT_VERSION, magic: bytes = MAGIC) -> bytes:
    """The 256-byte file header for ``run_id`` (a journal's, or with another 8-byte ``magic``
    and its ``version``, an inbox's)."""
    rid = run_id.encode("ascii")
    if len(rid) > MAX_RUN_ID_LEN:
        raise ValueError(f"run id longer than {MAX_RUN_ID_LEN} bytes")
    buf = bytearray(HEADER_SIZE)
    _HEADER_FIXED.pack_into(buf, 0, magic, version, 0, len(rid), 0)
    buf[_HEADER_FIXED.size : _HEADER_FIXED.size + len(rid)] = rid
    _CRC.pack_into(buf, _HEADER_CRC_AT, crc32(memoryview(buf)[:_HEADER_CRC_AT]))
    return bytes(buf)


class HeaderError(Exception):
    """The header is unreadable; ``reason`` says why, ``version`` is set for a newer format."""

    def __init__(self, reason: str, version: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.version = version


def decode_header(
    data: bytes | memoryview, magic: bytes = MAGIC, newest: int = FORMAT_VERSION
) -> tuple[int, str]:
    """Return ``(version, run_id)`` from the start of a file whose header has ``magic`` and a
    version up to ``newest`` (a journal's by default).

    Raises:
        HeaderError: wrong magic, short file, checksum mismatch, or a newer version
            (``version`` set).
    """
    if len(data) < HEADER_SIZE:
        raise HeaderError(f"file is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    found, version, _flags, rid_len, _ = _HEADER_FIXED.unpack_from(data, 0)
    if found != magic:
        kind = "journal" if magic == MAGIC else "inbox"
        raise HeaderError(f"not a tether {kind} (bad magic)")
    (stored,) = _CRC.unpack_from(data, _HEADER_CRC_AT)
    checksum_ok = stored == crc32(memoryview(data)[:_HEADER_CRC_AT])
    if version > newest:
        if checksum_ok:
            raise HeaderError(f"format version {version}", version=version)
        raise HeaderError(
            f"header checksum mismatch (the version field reads {version}: a damaged header, "
            "or one from a newer tether whose layout this version cannot check)"
        )
    if not checksum_ok:
        raise HeaderError("header checksum mismatch")
    if version < 1:
        raise HeaderError(f"unknown format version {version}")
    if rid_len > MAX_RUN_ID_LEN:
        raise HeaderError(f"run id length {rid_len} exceeds {MAX_RUN_ID_LEN}")
    start = _HEADER_FIXED.size
    try:
        run_id = bytes(data[start : start + rid_len]).decode("ascii")
    except UnicodeDecodeError:
        raise HeaderError("run id is not ASCII") from None
    return version, run_id


def payload_crc(payload: bytes) -> int:
    """The payload part of a frame checksum; the header fields are folded in by ``build_group``."""
    return crc32(payload)


_T = TypeVar("_T")


def encode_group(
    items: Iterable[_T], encode_into: Callable[[_T, bytearray, int], None]
) -> tuple[bytes, list[int]]:
    """Frame ``items`` as one group, each encoded by ``encode_into(item, buf, offset)`` (a
    msgspec ``Encoder.encode_into``) straight into the group's buffer, where ``build_group``
    would be given payloads encoded apart and copy each in: the same bytes, one buffer.

    Returns the group and each payload's length (for the caller to bound: ``MAX_PAYLOAD``).

    Raises:
        ValueError: the group would exceed ``MAX_GROUP``.
    """
    buf = bytearray()
    frames: list[tuple[int, int]] = []
    for item in items:
        off = len(buf)
        encode_into(item, buf, off + FRAME_HEADER_SIZE)
        n = len(buf) - off - FRAME_HEADER_SIZE
        buf += ZERO_PADDING[: align(n) - n]
        frames.append((off, n))
    total = len(buf)
    if total > MAX_GROUP:
        raise ValueError(f"group of {total} bytes exceeds {MAX_GROUP}")
    view = memoryview(buf)
    for off, n in frames:
        start = off + FRAME_HEADER_SIZE
        pcrc = crc32(view[start : start + n])
        _FRAME.pack_into(buf, off, crc32(_FRAME_TAIL.pack(n, off, total), pcrc), n, off, total)
    view.release()
    return bytes(buf), [n for _, n in frames]


def build_group(payloads: Sequence[tuple[bytes, int]]) -> bytes:
    """Frame ``payloads`` (each with its ``payload_crc``) as one group, ready for one write."""
    total = sum(frame_size(len(p)) for p, _ in payloads)
    if total > MAX_GROUP:
        raise ValueError(f"group of {total} bytes exceeds {MAX_GROUP}")
    buf = bytearray(total)
    off = 0
    for payload, pcrc in payloads:
        n = len(payload)
        tail = _FRAME_TAIL.pack(n, off, total)
        _FRAME.pack_into(buf, off, crc32(tail, pcrc), n, off, total)
        start = off + FRAME_HEADER_SIZE
        buf[start : start + n] = payload
        off += frame_size(n)
    return bytes(buf)


class FrameHeader:
    """A parsed frame header; ``valid_at`` says whether it can describe a frame at an offset."""

    __slots__ = ("crc", "group_len", "group_off", "length")

    def __init__(self, data: bytes | memoryview, offset: int) -> None:
        self.crc, self.length, self.group_off, self.group_len = _FRAME.unpack_from(data, offset)

    def problem(self, offset: int, file_size: int) -> str | None:
        """Why these fields cannot describe a frame at ``offset``, or ``None`` if they can."""
        if self.length == 0:
            return "zero length"
        if self.length > MAX_PAYLOAD:
            return f"length {self.length} exceeds the {MAX_PAYLOAD}-byte limit"
        end = offset + frame_size(self.length)
        if end > file_size:
            return f"frame of {frame_size(self.length)} bytes runs past the end of the file"
        if self.group_off % ALIGN or self.group_len % ALIGN:
            return "misaligned group fields"
        if self.group_off > offset - HEADER_SIZE:
            return "group would start before the first frame"
        if self.group_off + frame_size(self.length) > self.group_len:
            return "frame runs past the end of its group"
        return None

    def checksum_ok(self, data: bytes | memoryview, offset: int) -> bool:
        """Whether the stored CRC matches the payload and header fields."""
        start = offset + FRAME_HEADER_SIZE
        pcrc = crc32(memoryview(data)[start : start + self.length])
        stored: int = self.crc
        return crc32(memoryview(data)[offset + 4 : offset + FRAME_HEADER_SIZE], pcrc) == stored


def is_zero(data: bytes | memoryview, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` holds only zero bytes."""
    view = memoryview(data)[start:end]
    return not view.tobytes().strip(b"\x00") if len(view) else True
