"""The header and frame layout, byte for byte."""

from __future__ import annotations

import pathlib
import struct

import pytest

from tether import JournalCorruptError, JournalVersionError
from tether.journal import FileStore, Manifest, RunStarted, verify_file
from tether.journal._format import (
    FORMAT_VERSION,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    MAX_PAYLOAD,
    build_group,
    decode_header,
    encode_header,
    frame_size,
    payload_crc,
)
from tether.journal._reader import scan
from tether.journal._records import ToolStarted, encode_event


def test_header_round_trip() -> None:
    header = encode_header("run-1")
    assert len(header) == HEADER_SIZE
    assert header.startswith(b"TETHERJ\x00")
    assert decode_header(header) == (FORMAT_VERSION, "run-1")


def test_frames_are_aligned_and_carry_their_group() -> None:
    payloads = [encode_event(ToolStarted(seq=i, call_id="c" * (i + 1))) for i in range(3)]
    group = build_group([(p, payload_crc(p)) for p in payloads])
    assert len(group) == sum(frame_size(len(p)) for p in payloads)
    off = 0
    for p in payloads:
        _crc, length, group_off, group_len = struct.unpack_from("<IIII", group, off)
        assert (length, group_off, group_len) == (len(p), off, len(group))
        assert off % 8 == 0
        off += FRAME_HEADER_SIZE + ((len(p) + 7) & ~7)


def test_scan_reads_back_a_group() -> None:
    events = [ToolStarted(seq=i, call_id=f"c{i}") for i in range(4)]
    group = build_group([(encode_event(e), payload_crc(encode_event(e))) for e in events])
    result = scan(encode_header("r") + group + bytes(4096), "mem")
    assert result.events == events
    assert result.groups == 1
    assert result.damage is None
    assert result.end == HEADER_SIZE + len(group)


async def test_newer_format_version_is_refused(store_root: pathlib.Path) -> None:
    async with FileStore(store_root) as store:
        journal = await store.create(
            "run-v", [RunStarted(run_id="run-v", manifest=Manifest(model="m"), messages=[])]
        )
        await journal.aclose()
        path = store.location("run-v")
        data = bytearray(pathlib.Path(path).read_bytes())
        data[:HEADER_SIZE] = encode_header("run-v", version=FORMAT_VERSION + 1)
        pathlib.Path(path).write_bytes(bytes(data))
        with pytest.raises(JournalVersionError) as info:
            await store.open("run-v")
        assert info.value.version == FORMAT_VERSION + 1
        assert "upgrade tether" in str(info.value)
        with pytest.raises(JournalVersionError):
            verify_file(path)


def test_not_a_journal(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.journal"
    path.write_bytes(b"hello world" * 40)
    with pytest.raises(JournalCorruptError) as info:
        verify_file(str(path))
    assert info.value.offset == 0
    assert "bad magic" in info.value.reason


def test_oversized_length_is_bounded() -> None:
    bad = struct.pack("<IIII", 0, MAX_PAYLOAD + 1, 0, 1 << 30) + bytes(64)
    result = scan(encode_header("r") + bad, "mem")
    assert result.damage is not None
    assert result.damage.kind == "torn"
    assert "exceeds" in result.damage.reason
