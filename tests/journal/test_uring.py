"""Appends through io_uring: the same journal as through the writer threads, failures included.

Skipped where the kernel (or the platform) gives no ring. The SIGKILL matrix in
``tests/crash/test_sigkill_writer.py`` runs over both paths.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pathlib
import random
from collections import deque
from collections.abc import AsyncIterator

import anyio
import pytest

from tether import JournalBrokenError
from tether.journal import FileJournal, FileStore, ToolResult, verify_file
from tether.journal._uring import _OP_WRITE, Ring, _Cqe
from tether.testing import FaultyFileOps


@contextlib.asynccontextmanager
async def ring_store(root: pathlib.Path) -> AsyncIterator[FileStore]:
    """A store appending through io_uring (the test is skipped where there is none)."""
    async with FileStore(root, redact=None) as store:
        if not store.uses_io_uring:
            pytest.skip("io_uring is not available here")
        yield store


def swap_descriptor(journal: FileJournal, flags: int) -> None:
    """Put ``/dev/null`` opened with ``flags`` where the journal's descriptor is."""
    null = os.open(os.devnull, flags)
    try:
        os.dup2(null, journal._file.fd)
    finally:
        os.close(null)


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


async def test_a_short_write_is_finished_and_synced(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may write less than asked; the rest goes out in a new write+sync pair."""
    original = Ring._push
    cut = {"count": 0}

    def push_short(
        self: Ring,
        opcode: int,
        fd: int,
        flags: int,
        user_data: int,
        off: int,
        addr: int,
        length: int,
        op_flags: int,
    ) -> None:
        if opcode == _OP_WRITE and length > 1000:  # ask the kernel for fewer bytes than sent
            cut["count"] += 1
            length = 1000
        original(self, opcode, fd, flags, user_data, off, addr, length, op_flags)

    monkeypatch.setattr(Ring, "_push", push_short)
    async with ring_store(tmp_path) as store:
        journal = await store.create("r")
        stamped = await journal.append(results("big", [5000, 2500]))
        assert [e.seq for e in stamped] == [0, 1]
        assert cut["count"] > 1  # several rounds of 1,000 bytes
        await journal.aclose()
    async with FileStore(tmp_path) as store:
        events = await store.read("r")
    assert [len(str(e.content)) for e in events if isinstance(e, ToolResult)] == [5000, 2500]


async def test_a_failed_write_poisons_only_its_journal(tmp_path: pathlib.Path) -> None:
    async with ring_store(tmp_path) as store:
        bad = await store.create("bad")
        good = await store.create("good")
        await bad.append(results("a", [10]))
        # Put a read-only descriptor where the journal's is: the kernel's write gets EBADF.
        swap_descriptor(bad, os.O_RDONLY)
        with pytest.raises(JournalBrokenError) as info:
            await bad.append(results("b", [10]))
        assert isinstance(info.value.__cause__, OSError)
        assert "io_uring write" in str(info.value.__cause__)
        with pytest.raises(JournalBrokenError):  # never retried, never written
            await bad.append(results("c", [10]))
        assert bad.broken
        assert [e.call_id for e in bad.events if isinstance(e, ToolResult)] == ["a-0"]
        await good.append(results("g", [10, 20]))  # the other journal goes on
        assert len(good.events) == 2
        await bad.aclose()
        await good.aclose()


async def test_threads_when_asked_or_when_file_ops_are_custom(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FileStore(tmp_path / "a", io_uring=False) as store:
        assert not store.uses_io_uring
    async with FileStore(tmp_path / "b", file_ops=FaultyFileOps()) as store:
        assert not store.uses_io_uring  # injected faults must reach every write and sync
    monkeypatch.setenv("TETHER_IO_URING", "0")
    async with FileStore(tmp_path / "c") as store:
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


async def test_a_failed_sync_poisons_its_journal(tmp_path: pathlib.Path) -> None:
    async with ring_store(tmp_path) as store:
        journal = await store.create("r")
        # /dev/null takes the write but refuses fdatasync (EINVAL): a sync that ran and failed.
        swap_descriptor(journal, os.O_WRONLY)
        with pytest.raises(JournalBrokenError) as info:
            await journal.append(results("a", [10]))
        assert "io_uring fdatasync" in str(info.value.__cause__)
        with pytest.raises(JournalBrokenError):
            await journal.append(results("b", [10]))
        assert journal.events == []
        await journal.aclose()


async def test_journals_take_turns_when_the_ring_is_full(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Busy journals cannot keep every slot: one that waits for a slot gets the next free one."""
    monkeypatch.setattr("tether.journal._uring.MAX_IN_FLIGHT", 2)
    async with ring_store(tmp_path) as store:
        busy = [await store.create(f"busy{i}") for i in range(2)]
        late = await store.create("late")
        done = anyio.Event()

        async def hammer(journal: FileJournal) -> None:
            while not done.is_set():
                await journal.append(results("h", [10]))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for journal in busy:
                    for _ in range(2):  # always a group pending while one is in flight
                        tg.start_soon(hammer, journal)
                await anyio.sleep(0.05)
                await late.append(results("late", [10]))
                done.set()
        assert len(late.events) == 1
        for journal in [*busy, late]:
            await journal.aclose()


@pytest.mark.timeout(10)
def test_completion_indices_wrap_at_32_bits() -> None:
    """The kernel's ring indices are 32-bit counters: reaping across the wrap ends."""
    ring = object.__new__(Ring)
    ring._cq_head, ring._cq_tail = ctypes.c_uint32(0xFFFFFFFF), ctypes.c_uint32(1)
    ring._cq_mask = 7
    ring._cqes = (_Cqe * 8)()  # two completions waiting, for no pair: skipped
    ring._efd = os.eventfd(0, os.EFD_NONBLOCK)
    ring._pairs, ring._waiting, ring._drained, ring._closed = {}, deque(), None, False
    try:
        ring._reap()
        assert ring._cq_head.value == 1
    finally:
        os.close(ring._efd)
