"""Blocking calls on the writer threads: results, errors, cancellation (`GroupCommitter.run`)."""

from __future__ import annotations

import threading

import anyio
import pytest

from tether.journal.lowlevel import GroupCommitter


async def test_run_returns_the_result_and_raises_the_error() -> None:
    async with GroupCommitter(threads=2) as committer:
        name = await committer.run(lambda: threading.current_thread().name)
        assert name.startswith("tether-journal-")
        with pytest.raises(ZeroDivisionError):
            await committer.run(lambda: 1 // 0)


async def test_a_cancelled_run_still_waits_for_its_call() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []
    results: list[str] = []

    def slow() -> str:  # say, opening a journal: its descriptor must not be lost
        started.set()
        release.wait(10)
        finished.append(True)
        return "opened"

    scope = anyio.CancelScope()

    async def caller(committer: GroupCommitter) -> None:
        with scope:
            results.append(await committer.run(slow))
            await anyio.sleep(5)  # the cancellation lands at the next checkpoint
            results.append("not reached")

    async with GroupCommitter(threads=1) as committer, anyio.create_task_group() as tg:
        tg.start_soon(caller, committer)
        await anyio.to_thread.run_sync(started.wait, 10)
        scope.cancel()
        await anyio.sleep(0.1)
        assert finished == []  # the caller is still held by the call
        assert results == []
        release.set()
    assert finished == [True]
    assert results == ["opened"]  # the result reached the caller; nothing leaked


async def test_run_after_close_is_refused() -> None:
    committer = GroupCommitter(threads=1)
    async with committer:
        pass
    with pytest.raises(RuntimeError, match="not running"):
        await committer.run(lambda: None)
