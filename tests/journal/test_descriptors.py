"""A ``FileStore``'s descriptor budget (``_descriptors``): every open waits for a descriptor of
its budget instead of failing, and a shortage caused elsewhere in the process is waited out.

The limits themselves are tested for real in child processes (``tests/supervisor/
test_descriptors.py``); here the budget's arithmetic, its waits, and ``EMFILE`` injected
through the file layer.
"""

from __future__ import annotations

import errno
import logging
import pathlib
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from tether import JournalIOError, RunNotFoundError
from tether.journal import FileJournal, FileStore, Manifest, RunStarted, ToolResult
from tether.journal._descriptors import Descriptors, default_budget, out_of_descriptors
from tether.testing import FaultyFileOps


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])


@contextmanager
def soft_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(
    ("limit", "budget", "short_uses", "journals"),
    [(64, 48, 4, 36), (256, 192, 16, 144), (1024, 768, 16, 720)],
)
def test_the_budget_is_the_limit_less_a_quarter(
    limit: int, budget: int, short_uses: int, journals: int
) -> None:
    with soft_limit(limit):
        assert default_budget() == budget
        made = Descriptors()
    assert (made.budget, made.short_uses, made.journals) == (budget, short_uses, journals)
    assert made.journals + 3 * made.short_uses == budget
    with pytest.raises(ValueError, match="at least 5 descriptors"):
        Descriptors(4)


def test_a_shortage_is_recognised_through_the_errors_that_wrap_it() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    assert out_of_descriptors(emfile)
    assert out_of_descriptors(JournalIOError("r.journal", "read", emfile))
    wrapped = RuntimeError("cannot be read")
    wrapped.__cause__ = OSError(errno.ENFILE, "Too many open files in system")
    assert out_of_descriptors(wrapped)
    assert not out_of_descriptors(OSError(errno.ENOSPC, "No space left on device"))


async def test_a_journal_waits_for_a_descriptor_another_closes(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path, descriptors=20) as store:
        budget = store.descriptors
        assert budget.journals == 17
        held = [await store.create(f"r{i}", [started(f"r{i}")]) for i in range(17)]
        assert budget.journals_open == 17
        made: list[FileJournal] = []
        async with anyio.create_task_group() as tg:

            async def create_one() -> None:
                made.append(await store.create("late", [started("late")]))

            tg.start_soon(create_one)
            await anyio.wait_all_tasks_blocked()
            assert budget._journal_tokens.statistics().tasks_waiting == 1
            assert not made
            assert not await store.exists("late")
            await held.pop().aclose()
        assert [j.run_id for j in made] == ["late"]
        assert budget.journals_open == 17
        # A create cancelled while it waits takes nothing and makes nothing.
        with anyio.move_on_after(0.05):
            await store.create("never", [started("never")])
        assert not await store.exists("never")
        assert budget.journals_open == 17
        for journal in [*held, *made]:
            await journal.aclose()
        assert budget.journals_open == 0
        # An open that fails gives its descriptor back too.
        with pytest.raises(RunNotFoundError):
            await store.open("nobody")
        async with await store.open("r0"):
            assert budget.journals_open == 1
        assert budget.journals_open == 0


async def test_a_shortage_elsewhere_is_waited_out_and_said_once(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``EMFILE`` from the file layer (other code took the process's descriptors): creating,
    opening, reading, blobs each try again until a descriptor is free; the run is made once."""
    caplog.set_level(logging.INFO, logger="tether.journal")
    faults = FaultyFileOps()
    async with FileStore(tmp_path, file_ops=faults, blob_threshold=10) as store:
        faults.fail("open", errno.EMFILE, times=3)
        journal = await store.create("r", [started("r")])
        faults.fail("open", errno.EMFILE, times=3)  # the blob
        [result] = await journal.append([ToolResult(call_id="t", ok=True, content="x" * 100)])
        await journal.aclose()
        assert isinstance(result, ToolResult)
        assert result.blob is not None
        faults.fail("open", errno.EMFILE, times=3)
        async with await store.open("r") as reopened:
            assert len(reopened.events) == 2
        faults.fail("open", errno.EMFILE, times=3)
        assert len(await store.read("r")) == 2
        faults.fail("open", errno.EMFILE, times=3)
        assert await store.load_blob(result.blob) == "x" * 100
        assert await store.list_runs() == ["r"]
        assert store.descriptors.journals_open == 0
    shortages = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert [r.levelname for r in shortages] == ["WARNING"] * 5  # once per shortage
    recovered = [r for r in caplog.records if "available again" in r.getMessage()]
    assert len(recovered) == 5


async def test_an_answer_is_not_queued_again_on_a_shortage(tmp_path: pathlib.Path) -> None:
    """Queuing an answer is not tried again: a shortage after it was written would queue it
    twice. Its sender hears of it, and nothing was acknowledged."""
    faults = FaultyFileOps()
    async with FileStore(tmp_path, file_ops=faults) as store:
        await (await store.create("r", [started("r")])).aclose()
        faults.fail("open", errno.EMFILE)
        with pytest.raises(JournalIOError, match="Too many open files"):
            await store.post("r", ToolResult(call_id="t", ok=True, content="x"))
        assert await store.take_inbox("r") == []
