"""Reading a journal while its writer appends: ``FileStore.read`` takes no lock.

Its contract: "If a writer is appending at the same time, an unfinished last group is left
out." A reader that copies the file while two appends land can see the later append's bytes but
not the earlier one's (the earlier one sat in a part of the file it had already copied, still
preallocated zeros). That is a race, not damage, and must not be reported as corruption.
"""

from __future__ import annotations

import pathlib
import threading

import anyio

from tether.journal import FileStore, Manifest, ModelResponse, RunStarted, ToolStarted
from tether.journal.lowlevel import FileOps

RUN = "run-live"
CHUNK = 1 << 24  # FileOps.read_all reads at most this much per pread


class PausingReads(FileOps):
    """Pauses after the first ``pread`` of a multi-chunk read until ``resume`` is set."""

    def __init__(self) -> None:
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.armed = False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if self.armed and offset == 0 and size == CHUNK:
            self.armed = False
            self.paused.set()
            assert self.resume.wait(30)
        return data


async def test_read_racing_appends_is_not_corruption(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    ops = PausingReads()
    async with (
        FileStore(root, redact=None) as writer_store,
        FileStore(root, redact=None, file_ops=ops) as reader_store,
    ):
        started = RunStarted(run_id=RUN, manifest=Manifest(model="m"), messages=[])
        journal = await writer_store.create(RUN, [started])
        # One large event brings the data to just under the first 16 MiB chunk (a write this
        # large extends the file exactly), a small one makes the writer preallocate past it.
        big = ModelResponse(message={"text": "x" * (CHUNK - 4096)})
        await journal.append([big])
        await journal.append([ToolStarted(call_id="small")])
        assert journal.size < CHUNK < (root / "runs" / f"{RUN}.journal").stat().st_size
        before = list(journal.events)

        result: list[object] = []

        async def read() -> None:
            try:
                result.append(await reader_store.read(RUN))
            except Exception as exc:  # raised below, outside the task group
                result.append(exc)

        ops.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.to_thread.run_sync(ops.paused.wait)
            # The reader has copied [0, 16 MiB): group A starts inside that range, group B
            # after it; the reader will see B but only the end of A.
            a_start = journal.size
            await journal.append([ToolStarted(call_id="a", name="a" * 4000)])
            b_start = journal.size
            await journal.append([ToolStarted(call_id="b", name="b" * 100)])
            assert a_start < CHUNK < b_start
            ops.resume.set()
        await journal.aclose()

    # Either snapshot is fine: without A and B, or (had it waited) with both.
    events = result[0]
    if isinstance(events, Exception):
        raise events
    assert isinstance(events, list)
    assert events[: len(before)] == before
