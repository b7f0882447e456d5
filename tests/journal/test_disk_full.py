"""A really full filesystem (a small loop-mounted ext4, or a tmpfs): what an append or a create
that runs out of space leaves behind.

An append whose group fits in the space left while the zeros planned after it (preallocation)
do not is the case the issue found after a disk-full trial: the group reached the file, the
append failed, and a reopened journal read the group as valid (166 never-acknowledged records in
11 journals). Here the free space is set to a few KiB, appends go on until one fails, and the
reopened journal must hold exactly the acknowledged events, through io_uring and through the
writer threads.
"""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

from tether import JournalBrokenError, JournalIOError
from tether.journal import AnyEvent, FileStore, Manifest, Resumed, RunStarted, verify_file

from .._disk import fill_disk


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])


def leave_free(mount: pathlib.Path, nbytes: int) -> pathlib.Path:
    """Fill the filesystem but for about ``nbytes``; return the filler (delete it to free)."""
    gap = mount / "gap"
    gap.write_bytes(b"\xff" * nbytes)
    filler = fill_disk(mount)
    gap.unlink()
    return filler


@pytest.mark.parametrize("io_uring", [True, False], ids=["io_uring", "threads"])
async def test_an_append_that_runs_out_of_space_leaves_no_group_a_reopen_accepts(
    small_fs: pathlib.Path, io_uring: bool
) -> None:
    root = small_fs / "store"
    acked: list[AnyEvent] = []
    async with FileStore(root, redact=None, io_uring=io_uring) as store:
        if io_uring and not store.uses_io_uring:
            pytest.skip("io_uring is not available here")
        journal = await store.create("r", [started("r")])
        acked += journal.events
        leave_free(small_fs, 8192)
        with pytest.raises(JournalBrokenError) as info:  # noqa: PT012 - appends until one fails
            for attempt in range(10_000):
                acked += await journal.append([Resumed(attempt=attempt, host="h" * 500)])
        assert "No space left on device" in str(info.value)
        assert len(acked) > 20  # appends filled the preallocated space first
        assert os.path.getsize(journal.path) == journal.size  # the refused group is cut off
        await journal.aclose()
    result = verify_file(str(root / "runs" / "r.journal"))
    assert result.damage is None
    assert result.events == acked
    async with (
        FileStore(root, redact=None, io_uring=io_uring) as store,
        await store.open("r") as journal,  # still on the full disk
    ):
        assert journal.events == acked


async def test_creating_a_run_on_a_full_disk_raises_a_typed_error(small_fs: pathlib.Path) -> None:
    root = small_fs / "store"
    async with FileStore(root, redact=None) as store:
        filler = fill_disk(small_fs)
        with pytest.raises(JournalIOError) as info:
            await store.create("r", [started("r")])
        assert info.value.errno == errno.ENOSPC
        assert info.value.path == store.location("r")
        assert str(info.value).endswith("cannot create the run: [Errno 28] No space left on device")
        assert await store.list_runs() == []  # the run does not exist, half made or otherwise
        filler.unlink()
        journal = await store.create("r", [started("r")])
        assert len(journal.events) == 1
        await journal.aclose()
