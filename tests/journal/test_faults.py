"""I/O faults while writing a journal (RELIABILITY J8, J9), injected through ``FaultyFileOps``.

J8: a failed write (a full disk, a torn write) poisons the handle; nothing unacknowledged is
reported as durable, and reopening recovers exactly what was acknowledged.
J9: a failed ``fdatasync`` is never retried; reopening re-reads what is really on disk.

The append faults run on both append paths (the ``io_uring`` fixture): the writer threads, and
the ring where the kernel gives one, whose writes and syncs meet the same faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest

from tether import JournalBrokenError, JournalClosedError, JournalIOError, RunExistsError
from tether.journal import (
    AnyEvent,
    Event,
    FileJournal,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolResult,
    verify_file,
)
from tether.journal._file import reaches_ring
from tether.testing import FaultyFileOps

O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)

# --- helpers -----------------------------------------------------------------------------------


@pytest.fixture(params=["threads", "io_uring"])
def io_uring(request: pytest.FixtureRequest) -> bool:
    """Each append path: the writer threads, and io_uring (skipped where the kernel refuses)."""
    return bool(request.param == "io_uring")


@contextlib.asynccontextmanager
async def faulty_store(
    root: pathlib.Path, faults: FaultyFileOps, io_uring: bool, **options: Any
) -> AsyncIterator[FileStore]:
    """A store on ``faults`` appending through the path asked for."""
    async with FileStore(root, file_ops=faults, io_uring=io_uring, **options) as store:
        if io_uring and not store.uses_io_uring:
            assert reaches_ring(faults), "the ring cannot follow these file operations"
            pytest.skip("io_uring is not available here")
        yield store


def started(run_id: str) -> RunStarted:
    return RunStarted(
        run_id=run_id,
        manifest=Manifest(model="test-model"),
        messages=[{"role": "user", "content": "count the files"}],
    )


def responses(first: int, count: int) -> list[Event]:
    return [
        ModelResponse(message={"role": "assistant", "content": f"step {i} " + "x" * 40})
        for i in range(first, first + count)
    ]


def seqs(events: Sequence[AnyEvent]) -> list[int]:
    return [e.seq for e in events]


async def reopen_healthy(root: pathlib.Path, run_id: str) -> tuple[list[AnyEvent], int]:
    """Open ``run_id`` with a fault-free store; return its events and the next seq it appends."""
    async with FileStore(root) as store, await store.open(run_id) as journal:
        events = list(journal.events)
        [appended] = await journal.append(responses(1000, 1))
        assert appended.seq == len(events) == journal.next_seq - 1
        return events, appended.seq


# --- the fault layer itself --------------------------------------------------------------------


def test_fail_counts_from_arming_and_respects_times(tmp_path: pathlib.Path) -> None:
    faults = FaultyFileOps()
    fd = faults.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)
    try:
        faults.fdatasync(fd)
        faults.fail("fdatasync", errno.EIO, after=1, times=2)
        faults.fdatasync(fd)  # the one allowed call
        for _ in range(2):
            with pytest.raises(OSError, match="injected") as info:
                faults.fdatasync(fd)
            assert info.value.errno == errno.EIO
        faults.fdatasync(fd)  # exhausted
        assert faults.calls["fdatasync"] == 5

        faults.fail("fsync", errno.EROFS, times=None)
        for _ in range(3):
            with pytest.raises(OSError, match="injected"):
                faults.fsync(fd)
        faults.reset()
        faults.fsync(fd)
        assert faults.calls == {"fsync": 1}
    finally:
        os.close(fd)


def test_fault_errno_maps_to_the_usual_oserror_subclass(tmp_path: pathlib.Path) -> None:
    faults = FaultyFileOps()
    faults.fail("open", errno.ENOENT)
    with pytest.raises(FileNotFoundError):
        faults.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)


def test_short_writes_and_disk_full(tmp_path: pathlib.Path) -> None:
    faults = FaultyFileOps()
    fd = faults.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)
    try:
        faults.short_writes(3)
        assert faults.pwrite(fd, memoryview(b"abcdefgh"), 0) == 3
        faults.write_all(fd, b"abcdefgh", 0)
        assert faults.calls["pwrite"] == 1 + 3
        faults.short_writes(None)
        faults.fail_write_after_bytes(5)
        with pytest.raises(OSError, match="injected") as info:
            faults.write_all(fd, b"12345678", 8)
        assert info.value.errno == errno.ENOSPC
        assert faults.read_all(fd) == b"abcdefgh12345"
        with pytest.raises(OSError, match="injected"):
            faults.pwrite(fd, memoryview(b"z"), 0)
    finally:
        os.close(fd)


def test_bad_arguments_are_refused() -> None:
    faults = FaultyFileOps()
    with pytest.raises(ValueError, match="unknown operation"):
        faults.fail("write_all")
    with pytest.raises(ValueError, match="after"):
        faults.fail("pwrite", after=-1)
    with pytest.raises(ValueError, match="times"):
        faults.fail("pwrite", times=0)
    with pytest.raises(ValueError, match="max_bytes"):
        faults.short_writes(0)
    with pytest.raises(ValueError, match="nbytes"):
        faults.fail_write_after_bytes(-1)


# --- short writes ------------------------------------------------------------------------------


async def test_short_writes_are_completed_and_verify(
    tmp_path: pathlib.Path, io_uring: bool
) -> None:
    faults = FaultyFileOps()
    faults.short_writes(7)
    async with faulty_store(tmp_path, faults, io_uring) as store:
        journal = await store.create("r", [started("r")])
        acked = list(journal.events)
        for i in range(5):
            before = faults.calls["pwrite"]
            acked += await journal.append(responses(i * 3, 3))
            assert faults.calls["pwrite"] - before > 20  # the group took many short writes
        await journal.aclose()
    path = str(tmp_path / "runs" / "r.journal")
    result = verify_file(path)
    assert result.damage is None
    assert result.events == acked
    recovered, next_seq = await reopen_healthy(tmp_path, "r")
    assert recovered == acked
    assert next_seq == 16


# --- J8: ENOSPC in the middle of an append -----------------------------------------------------


@pytest.mark.parametrize("room", [0, 8, 16, 40, 150])
async def test_disk_full_mid_append_poisons_and_recovers_acked(
    tmp_path: pathlib.Path, room: int, io_uring: bool
) -> None:
    faults = FaultyFileOps()
    async with faulty_store(tmp_path, faults, io_uring) as store:
        journal = await store.create("r", [started("r")])
        acked = list(journal.events) + await journal.append(responses(0, 2))
        size_before = journal.size

        faults.fail_write_after_bytes(room)
        group = responses(2, 3)
        with pytest.raises(JournalBrokenError) as info:
            await journal.append(group)
        cause = info.value.__cause__
        assert isinstance(cause, OSError)
        assert cause.errno == errno.ENOSPC
        assert "journal handle is broken: [Errno 28] No space left on device" in str(info.value)
        assert journal.broken
        assert journal.events == acked  # not acknowledged
        assert journal.size == size_before
        # The part of the group that fit is cut off again before the handle is poisoned.
        assert os.path.getsize(journal.path) == size_before

        calls = faults.calls
        for _ in range(3):
            with pytest.raises(JournalBrokenError) as later:
                await journal.append(responses(10, 1))
            assert later.value.reason == info.value.reason  # the root cause, every time
        await journal.aclose()  # no trim on a broken handle
        after = faults.calls
        for op in ("pwrite", "fdatasync", "fsync", "ftruncate"):
            assert after[op] == calls[op], op

    runs = tmp_path / "runs"
    recovered, next_seq = await reopen_healthy(tmp_path, "r")
    assert recovered == acked
    assert next_seq == len(acked)
    assert [p.name for p in runs.iterdir() if ".torn-" in p.name] == []  # nothing was torn
    assert verify_file(str(runs / "r.journal")).damage is None


async def test_disk_full_while_extending_the_file(tmp_path: pathlib.Path, io_uring: bool) -> None:
    # A group larger than the preallocated space is written past the old end of the file.
    faults = FaultyFileOps()
    big = ToolResult(call_id="c1", ok=True, content="y" * 200_000)
    async with faulty_store(tmp_path, faults, io_uring, blob_threshold=1 << 20) as store:
        journal = await store.create("r", [started("r")])
        acked = list(journal.events)
        faults.fail_write_after_bytes(100_000)
        with pytest.raises(JournalBrokenError):
            await journal.append([big])
        assert os.path.getsize(journal.path) == journal.size  # the 100,000 bytes are cut off
    recovered, _ = await reopen_healthy(tmp_path, "r")
    assert recovered == acked


async def test_failed_write_is_not_retried_by_later_appends(
    tmp_path: pathlib.Path, io_uring: bool
) -> None:
    faults = FaultyFileOps()
    async with faulty_store(tmp_path, faults, io_uring) as store:
        journal = await store.create("r")
        faults.fail("pwrite", errno.EIO)  # once only: a retry would succeed, and must not happen
        with pytest.raises(JournalBrokenError):
            await journal.append(responses(0, 1))
        with pytest.raises(JournalBrokenError):
            await journal.append(responses(1, 1))
        assert faults.calls["pwrite"] == 2  # the header write at create, then the failed one
        await journal.aclose()
        with pytest.raises(JournalClosedError):
            await journal.append(responses(2, 1))
    recovered, next_seq = await reopen_healthy(tmp_path, "r")
    assert recovered == []
    assert next_seq == 0


# --- J9: EIO on fdatasync ----------------------------------------------------------------------


async def test_fdatasync_eio_is_never_retried(tmp_path: pathlib.Path, io_uring: bool) -> None:
    faults = FaultyFileOps()
    async with faulty_store(tmp_path, faults, io_uring) as store:
        journal = await store.create("r", [started("r")])
        acked = list(journal.events)
        for i in range(3):
            acked += await journal.append(responses(i, 1))

        before = faults.calls
        faults.fail("fdatasync", errno.EIO)
        group = responses(3, 2)
        with pytest.raises(JournalBrokenError) as info:
            await journal.append(group)
        cause = info.value.__cause__
        assert isinstance(cause, OSError)
        assert cause.errno == errno.EIO
        after = faults.calls
        assert after["fdatasync"] - before["fdatasync"] == 1
        assert after["pwrite"] - before["pwrite"] == 1
        assert journal.events == acked

        with pytest.raises(JournalBrokenError):
            await journal.append(responses(9, 1))
        await journal.aclose()
        final = faults.calls
        for op in ("pwrite", "fdatasync", "fsync", "ftruncate"):
            assert final[op] == after[op], op

    recovered, next_seq = await reopen_healthy(tmp_path, "r")
    # The group was written but never synced: it may or may not have reached the disk.
    assert seqs(recovered) in (seqs(acked), [*seqs(acked), len(acked), len(acked) + 1])
    assert recovered[: len(acked)] == acked
    assert [getattr(e, "message", None) for e in recovered[len(acked) :]] in (
        [],
        [g.message for g in group if isinstance(g, ModelResponse)],
    )
    assert next_seq == len(recovered)


async def test_a_sync_failing_after_short_writes_is_asked_for_once(
    tmp_path: pathlib.Path, io_uring: bool
) -> None:
    """The sync comes once the whole batch is written, and its failure is final."""
    faults = FaultyFileOps()
    async with faulty_store(tmp_path, faults, io_uring) as store:
        journal = await store.create("r", [started("r")])
        acked = list(journal.events)
        before = faults.calls
        faults.short_writes(9)
        faults.fail("fdatasync", errno.EIO)
        with pytest.raises(JournalBrokenError) as info:
            await journal.append(responses(0, 2))
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.EIO
        after = faults.calls
        assert after["pwrite"] - before["pwrite"] > 10  # the batch, nine bytes at a time
        assert after["fdatasync"] - before["fdatasync"] == 1
        assert os.path.getsize(journal.path) == journal.size  # cut back to what was acked
        await journal.aclose()
    recovered, _ = await reopen_healthy(tmp_path, "r")
    assert recovered == acked


class GatedOps(FaultyFileOps):
    """Holds the writer thread inside the next ``fdatasync`` (after it succeeded) until released.

    It overrides ``fdatasync`` alone, which the ring cannot follow, so a store given it appends
    on the writer threads (these tests are about what a held writer thread sees).
    """

    def __init__(self) -> None:
        super().__init__()
        self.hold_next = False
        self.holding = threading.Event()
        self.release = threading.Event()

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        if self.hold_next:
            self.hold_next = False
            self.holding.set()
            self.release.wait(10)


async def test_concurrent_appends_sharing_a_failed_fsync_all_fail(tmp_path: pathlib.Path) -> None:
    faults = GatedOps()
    # One writer thread: while it is held inside journal A's sync, every append to journal B
    # queues up and then goes out as a single coalesced group with a single fdatasync.
    async with FileStore(tmp_path, file_ops=faults, sync_threads=1) as store:
        a = await store.create("a")
        b = await store.create("b", [started("b")])
        acked_b = list(b.events)
        try:
            faults.hold_next = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.append, responses(0, 1))
                await anyio.to_thread.run_sync(faults.holding.wait, 10)
                before = faults.calls
                faults.fail("fdatasync", errno.EIO)

                tasks = [asyncio.ensure_future(b.append(responses(i, 2))) for i in range(6)]
                while b.next_seq < len(acked_b) + 12:  # every append has queued its group
                    await asyncio.sleep(0)
                faults.release.set()
                results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            faults.release.set()

        assert all(isinstance(r, JournalBrokenError) for r in results), results
        assert b.broken
        assert b.events == acked_b
        after = faults.calls
        assert after["pwrite"] - before["pwrite"] == 1  # one coalesced write...
        assert after["fdatasync"] - before["fdatasync"] == 1  # ...and one sync, not retried
        assert not a.broken
        assert len(a.events) == 1

    recovered, _ = await reopen_healthy(tmp_path, "b")
    assert recovered[: len(acked_b)] == acked_b
    assert len(recovered) in (len(acked_b), len(acked_b) + 12)


async def cancel_inside_sync(journal: FileJournal, faults: GatedOps) -> None:
    """Append one event and cancel the appender while its group is held inside ``fdatasync``."""
    faults.hold_next = True
    task = asyncio.ensure_future(journal.append(responses(0, 1)))
    await anyio.to_thread.run_sync(faults.holding.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelled_append_still_lands_and_close_waits_for_it(
    tmp_path: pathlib.Path,
) -> None:
    faults = GatedOps()
    async with FileStore(tmp_path, file_ops=faults) as store:
        journal = await store.create("a", [started("a")])
        try:
            await cancel_inside_sync(journal, faults)
            assert len(journal.events) == 1  # not durable yet, so not reported
            closing = asyncio.ensure_future(journal.aclose())
            await asyncio.sleep(0.05)
            assert not closing.done()  # close waits for the group in flight
        finally:
            faults.release.set()
        await closing
        assert len(journal.events) == 2  # the sync succeeded: the group is recorded
        assert not journal.broken

    recovered, next_seq = await reopen_healthy(tmp_path, "a")
    assert seqs(recovered) == [0, 1]
    assert next_seq == 2


class FailingGate(GatedOps):
    """Like ``GatedOps``, but the held ``fdatasync`` then fails with ``EIO``."""

    def fdatasync(self, fd: int) -> None:
        held = self.hold_next
        super().fdatasync(fd)
        if held:
            raise OSError(errno.EIO, "injected after the hold")


async def test_cancelled_append_whose_sync_fails_poisons_the_handle(
    tmp_path: pathlib.Path,
) -> None:
    faults = FailingGate()
    async with FileStore(tmp_path, file_ops=faults) as store:
        journal = await store.create("a", [started("a")])
        try:
            await cancel_inside_sync(journal, faults)
        finally:
            faults.release.set()
        await journal.aclose()  # waits for the outcome nobody is waiting for any more
        assert journal.broken
        assert len(journal.events) == 1
        with pytest.raises(JournalClosedError):
            await journal.append(responses(1, 1))


# --- faults while creating a run ---------------------------------------------------------------


class NoTmpfileOps(FaultyFileOps):
    """A filesystem without ``O_TMPFILE``: the store creates runs under a temporary name."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if O_TMPFILE and flags & O_TMPFILE == O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)
        return super().open(path, flags, mode)


@pytest.fixture(params=["unnamed", "temporary-name"])
def create_ops(request: pytest.FixtureRequest) -> FaultyFileOps:
    """File operations for each way of creating a run: an ``O_TMPFILE`` linked in, or (where
    the filesystem lacks it) a temporary name linked, then unlinked."""
    if request.param == "unnamed" and not O_TMPFILE:
        pytest.skip("no O_TMPFILE on this platform")
    return FaultyFileOps() if request.param == "unnamed" else NoTmpfileOps()


def leftovers(runs: pathlib.Path) -> list[str]:
    return sorted(p.name for p in runs.iterdir() if not p.name.endswith(".journal"))


async def test_each_create_path_makes_the_same_run(
    tmp_path: pathlib.Path, create_ops: FaultyFileOps
) -> None:
    async with FileStore(tmp_path, file_ops=create_ops) as store:
        create_ops.reset()
        journal = await store.create("r", [started("r")])
        await journal.aclose()
        calls = create_ops.calls
        assert (calls["fsync"], calls["fsync_dir"], calls["link"]) == (1, 1, 1)
        assert calls["unlink"] == (1 if isinstance(create_ops, NoTmpfileOps) else 0)
        assert leftovers(tmp_path / "runs") == []
        [first] = await store.read("r")
        assert isinstance(first, RunStarted)
        with pytest.raises(RunExistsError):
            await store.create("r")
        assert leftovers(tmp_path / "runs") == []


async def test_fsync_dir_failure_during_create(
    tmp_path: pathlib.Path, create_ops: FaultyFileOps
) -> None:
    faults = create_ops
    async with FileStore(tmp_path, file_ops=faults) as store:
        faults.fail("fsync_dir", errno.EIO)
        with pytest.raises(JournalIOError, match="injected") as info:
            await store.create("r", [started("r")])
        assert info.value.errno == errno.EIO
        assert [p.name for p in (tmp_path / "runs").iterdir() if p.name.endswith(".tmp")] == []
        # Header and first group were durable before the link, so a visible run holds exactly
        # the events it was created with.
        if "r" in await store.list_runs():
            [first] = await store.read("r")
            assert isinstance(first, RunStarted)
            assert first.seq == 0
            journal = await store.open("r")  # the failed create released its lock
            assert journal.events == [first]
            [ev] = await journal.append(responses(0, 1))
            assert ev.seq == 1
            await journal.aclose()
        else:
            assert not await store.exists("r")


async def test_create_failing_before_link_leaves_no_run(
    tmp_path: pathlib.Path, create_ops: FaultyFileOps
) -> None:
    faults = create_ops
    async with FileStore(tmp_path, file_ops=faults) as store:
        faults.fail("fsync", errno.EIO)  # the header's fsync, before the run is linked in
        with pytest.raises(JournalIOError, match="injected"):
            await store.create("r")
        assert await store.list_runs() == []
        assert not await store.exists("r")
    runs = tmp_path / "runs"
    if not isinstance(faults, NoTmpfileOps):
        assert leftovers(runs) == []  # the unnamed file went with its descriptor
    # A later store removes a temporary name left over once it is old enough to be stale.
    for leftover in runs.iterdir():
        assert leftover.name.startswith(".r.")
        assert leftover.name.endswith(".tmp")
        os.utime(leftover, (0, 0))
    async with FileStore(tmp_path) as store:
        assert os.listdir(runs) == []
        journal = await store.create("r")
        await journal.aclose()


async def test_create_can_be_retried_after_a_failure_before_link(
    tmp_path: pathlib.Path, create_ops: FaultyFileOps
) -> None:
    faults = create_ops
    async with FileStore(tmp_path, file_ops=faults, sync_threads=1) as store:
        faults.fail("fsync", errno.EIO)
        with pytest.raises(JournalIOError, match="injected"):
            await store.create("r")
        # The retry runs on a reused worker thread: a temporary name would be the same one.
        journal = await store.create("r")
        assert journal.events == []
        with pytest.raises(RunExistsError):
            await store.create("r")


async def test_store_aclose_closes_every_journal_when_one_fails_to_trim(
    tmp_path: pathlib.Path, io_uring: bool
) -> None:
    faults = FaultyFileOps()
    store = FileStore(tmp_path, file_ops=faults, io_uring=io_uring)
    await store.__aenter__()
    journals: list[FileJournal] = [
        await store.create(f"r{i}", [started(f"r{i}")]) for i in range(3)
    ]
    faults.fail("ftruncate", errno.EIO)  # the first journal closed fails to trim its zeros
    try:
        with pytest.raises(OSError, match="injected"):
            await store.aclose()
        for journal in journals:
            with pytest.raises(JournalClosedError):
                await journal.append(responses(0, 1))
    finally:
        with contextlib.suppress(OSError):
            await store.aclose()
    async with FileStore(tmp_path) as healthy:
        for i in range(3):  # every lock was released
            await (await healthy.open(f"r{i}")).aclose()
