"""The disk-full fixture itself: a real filesystem that really fills up and frees again."""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

from ._disk import fill_disk


def test_a_filled_small_filesystem_refuses_writes_until_the_filler_goes(
    small_fs: pathlib.Path,
) -> None:
    filler = fill_disk(small_fs)
    assert filler.stat().st_size > 1024 * 1024
    probe = small_fs / "probe"
    with pytest.raises(OSError, match="No space left") as info:
        probe.write_bytes(b"x" * 65536)
    assert info.value.errno == errno.ENOSPC
    filler.unlink()
    probe.write_bytes(b"x" * 65536)
    assert probe.stat().st_size == 65536
    assert os.statvfs(small_fs).f_bavail > 0
