"""Appends through io_uring: the same journal as through the writer threads, failures included.

Skipped where the kernel (or the platform) gives no ring. The fault tests of ``test_faults.py``
(short writes, ``ENOSPC``, ``EIO``) and the SIGKILL matrix in ``tests/crash/test_sigkill_writer.py``
run over both paths; here are the kernel's own failures and what only the ring has (its slots,
its completion indices, the choice of path).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import random
from collections.abc import AsyncIterator

import anyio
import pytest

from tether import JournalBrokenError
from tether.journal import FileJournal, FileStore, ToolResult, verify_file
from tether.journal._file import reaches_ring
from tether.journal._target import CommitTarget, Pending
from tether.journal._uring import MAX_IN_FLIGHT, Ring, cq_indices, open_ring
from tether.journal._writer import create_file
from tether.journal.lowlevel import FileOps
from tether.testing import FaultyFileOps


@contextlib.asynccontextmanager
async def ring_store(root: pathlib.Path) -> AsyncIterator[FileStore]:
    """A store appending through io_uring (the test is skipped where there is none)."""
    async with FileStore(root, redact=None) as store:
        if not store.uses_io_uring:
            pytest.skip("io_uring is not available here")
        yield store


class SwappingOps(FileOps):
    """Puts ``/dev/null``, opened with ``flags``, where the descriptor of the next write the
    ring queues is, so that the kernel's own write or sync of it fails."""

    def __init__(self) -> None:
        self.flags: int | None = None

    def submit_pwrite(self, fd: int, size: int, offset: int) -> int:
        if self.flags is not None:
            null = os.open(os.devnull, self.flags)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
            self.flags = None
        return size


def results(prefix: str, sizes: list[int]) -> list[ToolResult]:
    return [
        ToolResult(call_id=f"{prefix}-{i}", ok=True, content="x" * n) for i, n in enumerate(sizes)
    ]


async def test_concurrent_appends_to_many_journals_read_back_in_order(
    tmp_path: pathlib.Path,
) -> None:
    rng = random.Random(7)
    written: dict[str, list[str]] = {}
    async with ring_store(tmp_path) as store:
        journals = [await store.create(f"r{i}") for i in range(20)]

        async def writer(journal: FileJournal) -> None:
            for k in range(15):  # small groups, and some past the preallocated space at once
                sizes = [rng.choice([0, 10, 3000, 70_000]) for _ in range(rng.randint(1, 3))]
                stamped = await journal.append(results(f"{journal.run_id}.{k}", sizes))
                ids = [e.call_id for e in stamped if isinstance(e, ToolResult)]
                written.setdefault(journal.run_id, []).extend(ids)

        async with anyio.create_task_group() as tg:
            for journal in journals:
                for _ in range(2):  # two appenders per journal: groups share a batch
                    tg.start_soon(writer, journal)
        assert store.syncs >= 20
        for journal in journals:
            await journal.aclose()
    async with FileStore(tmp_path, io_uring=False) as store:
        for run_id, call_ids in written.items():
            events = await store.read(run_id)
            assert [e.seq for e in events] == list(range(len(events)))
            assert sorted(str(getattr(e, "call_id", "")) for e in events) == sorted(call_ids)
    for path in (tmp_path / "runs").glob("*.journal"):
        verify_file(str(path))


@contextlib.asynccontextmanager
async def swapping_store(root: pathlib.Path) -> AsyncIterator[tuple[FileStore, SwappingOps]]:
    ops = SwappingOps()
    async with FileStore(root, redact=None, file_ops=ops) as store:
        if not store.uses_io_uring:
            pytest.skip("io_uring is not available here")
        yield store, ops


async def test_a_failed_write_poisons_only_its_journal(tmp_path: pathlib.Path) -> None:
    async with swapping_store(tmp_path) as (store, ops):
        bad = await store.create("bad")
        good = await store.create("good")
        await bad.append(results("a", [10]))
        ops.flags = os.O_RDONLY  # the kernel's write gets EBADF
        with pytest.raises(JournalBrokenError) as info:
            await bad.append(results("b", [10]))
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.EBADF
        assert "io_uring write" in str(info.value.__cause__)
        with pytest.raises(JournalBrokenError):  # never retried, never written
            await bad.append(results("c", [10]))
        assert bad.broken
        assert [e.call_id for e in bad.events if isinstance(e, ToolResult)] == ["a-0"]
        await good.append(results("g", [10, 20]))  # the other journal goes on
        assert len(good.events) == 2
        await bad.aclose()
        await good.aclose()


async def test_a_failed_sync_poisons_its_journal(tmp_path: pathlib.Path) -> None:
    async with swapping_store(tmp_path) as (store, ops):
        journal = await store.create("r")
        # /dev/null takes the write but refuses fdatasync (EINVAL): a sync that ran and failed.
        ops.flags = os.O_WRONLY
        with pytest.raises(JournalBrokenError) as info:
            await journal.append(results("a", [10]))
        assert "io_uring fdatasync" in str(info.value.__cause__)
        with pytest.raises(JournalBrokenError):
            await journal.append(results("b", [10]))
        assert journal.events == []
        await journal.aclose()


class NoSync(FaultyFileOps):
    """Syncs replaced by nothing: the ring, which would sync, cannot follow it."""

    def fdatasync(self, fd: int) -> None:
        return None


class CountedSync(FaultyFileOps):
    """Changes ``fdatasync`` and its ring hook alike: the ring can follow it."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        super().fdatasync(fd)

    def submit_fdatasync(self, fd: int) -> None:
        self.syncs += 1
        super().submit_fdatasync(fd)


def test_which_file_layers_the_ring_can_follow() -> None:
    assert reaches_ring(FileOps())
    assert reaches_ring(FaultyFileOps())
    assert reaches_ring(SwappingOps())  # a hook alone changes nothing the ring bypasses
    assert reaches_ring(CountedSync())
    assert not reaches_ring(NoSync())


async def test_which_path_a_store_appends_through(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FileStore(tmp_path / "probe") as store:
        available = store.uses_io_uring
    async with FileStore(tmp_path / "a", io_uring=False) as store:
        assert not store.uses_io_uring
    for ring in (True, False):
        ops = CountedSync()
        async with FileStore(tmp_path / f"b-{ring}", file_ops=ops, io_uring=ring) as store:
            assert store.uses_io_uring == (ring and available)  # its faults reach the ring
            journal = await store.create("r")
            before = ops.syncs
            await journal.append(results("a", [10]))
            assert ops.syncs == before + 1  # the append's one sync, whichever path made it
            await journal.aclose()
    async with FileStore(tmp_path / "c", file_ops=NoSync()) as store:
        assert not store.uses_io_uring  # the ring would sync what this layer says it does not
    monkeypatch.setenv("TETHER_IO_URING", "0")
    async with FileStore(tmp_path / "d") as store:
        assert not store.uses_io_uring


async def test_a_kernel_that_refuses_a_ring_leaves_the_threads(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As under ``kernel.io_uring_disabled`` or a seccomp filter: appends still work."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "io_uring_setup: Operation not permitted")

    monkeypatch.setattr(Ring, "__init__", refuse)
    async with FileStore(tmp_path) as store:
        assert not store.uses_io_uring
        journal = await store.create("r")
        [event] = await journal.append(results("a", [10]))
        assert event.seq == 0
        await journal.aclose()


async def test_journals_take_turns_when_the_ring_is_full(tmp_path: pathlib.Path) -> None:
    """Busy journals cannot keep every slot: one that waits for a slot gets the next free one.

    A ring of two slots, driven as ``GroupCommitter`` drives it: every busy journal always
    has a group pending while one is in flight, and is given it again as soon as it lands.
    """
    loop = asyncio.get_running_loop()
    runs = tmp_path / "runs"
    runs.mkdir()
    files = [create_file(str(runs), name, FileOps()) for name in ("busy0", "busy1", "late")]
    busy, late = files[:2], files[2]
    landed: dict[str, int] = {}
    done = False

    def submit(target: CommitTarget) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = loop.create_future()
        target.pending.append((b"", fut, lambda error: None))
        if not target.scheduled:
            target.scheduled = True
            assert ring is not None
            ring.start(target)
        return fut

    def deliver(target: CommitTarget, batch: list[Pending], error: BaseException | None) -> None:
        assert error is None
        name = os.path.basename(getattr(target, "path", ""))
        landed[name] = landed.get(name, 0) + len(batch)
        for _, fut, _ in batch:
            fut.set_result(None)
        if target is not late and not done:
            submit(target)  # at once, before the ring looks at who waits

    with pytest.raises(ValueError, match="max_in_flight"):
        open_ring(deliver, workers=2, max_in_flight=MAX_IN_FLIGHT + 1)
    ring = open_ring(deliver, workers=2, max_in_flight=2)
    if ring is None:
        pytest.skip("io_uring is not available here")
    try:
        with anyio.fail_after(20):
            for target in busy:
                submit(target)
                submit(target)
            await submit(late)
        assert landed["late.journal"] == 1
        # The busy ones went on meanwhile (which of them landed first is the disk's business:
        # under load one may still be in flight when the late one lands).
        assert landed.get("busy0.journal", 0) + landed.get("busy1.journal", 0) >= 1
    finally:
        done = True
        await ring.aclose()
        for target in files:
            target.close(trim=True)


def test_completion_indices_wrap_at_32_bits() -> None:
    """The kernel's ring indices are 32-bit counters: reaping across the wrap ends."""
    assert list(cq_indices(0xFFFFFFFE, 1)) == [0xFFFFFFFE, 0xFFFFFFFF, 0]
    assert list(cq_indices(5, 5)) == []
