"""A journal removed or replaced while a handle holds it: the handle stops, and writes nothing.

Removing ``runs/<id>.journal`` under a worker (a person's ``rm``, a script) leaves the worker's
descriptor pointing at a file nobody can open any more, and lets ``create`` make a new run of
the same id, which a second process then drives at the same time. The held handle must notice
at its next append and refuse it, writing nothing into the removed file.
"""

from __future__ import annotations

import os
import pathlib

import anyio
import pytest

from tether import JournalBrokenError, JournalRemovedError
from tether.journal import AnyEvent, FileStore, Manifest, RunStarted, ToolResult, ToolStarted
from tether.journal.lowlevel import FileOps
from tether.testing import FaultyFileOps

IO_PATHS = pytest.mark.parametrize("io_uring", [True, False], ids=["io_uring", "threads"])


@pytest.fixture(params=["inotify", "no-inotify"])
def watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """With the store's inotify watch, and without (as where inotify cannot be had: then every
    batch checks the name)."""
    if request.param == "no-inotify":
        monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    return str(request.param)


def started(tag: str) -> RunStarted:
    return RunStarted(run_id="r", manifest=Manifest(model=tag), messages=[])


def result(call_id: str) -> ToolResult:
    return ToolResult(call_id=call_id, ok=True, content=call_id)


def call_ids(events: list[AnyEvent]) -> list[str]:
    return [e.call_id for e in events if isinstance(e, ToolResult)]


async def loop_polls() -> None:
    """Let the event loop poll its descriptors once, as a working loop does all the time.

    The kernel queues the store's inotify event before the ``unlink`` or ``rename`` returns;
    the loop reads it at its next poll, which a round trip through a thread forces before this
    returns.
    """
    await anyio.to_thread.run_sync(lambda: None)


@IO_PATHS
async def test_a_removed_journal_breaks_its_handle_and_a_new_run_of_its_id_is_untouched(
    tmp_path: pathlib.Path, io_uring: bool, watch: str
) -> None:
    async with (
        FileStore(tmp_path, redact=None, io_uring=io_uring) as first,
        FileStore(tmp_path, redact=None, io_uring=io_uring) as second,
    ):
        held = await first.create("r", [started("first")])
        await held.append([result("old-1")])
        path = pathlib.Path(held.path)
        ghost = tmp_path / "ghost"
        os.link(path, ghost)  # keeps the removed file readable, to see what reaches it
        path.unlink()
        before = ghost.read_bytes()

        newer = await second.create("r", [started("second")])  # allowed: the name is free
        await newer.append([result("new-1")])
        await loop_polls()

        with pytest.raises(JournalRemovedError) as info:
            await held.append([result("old-2")])
        assert info.value.path == str(path)
        assert "journal was removed or replaced while held" in str(info.value)
        assert held.broken
        with pytest.raises(JournalRemovedError):  # and every later append
            await held.append([ToolStarted(call_id="old-3")])
        await held.aclose()
        assert ghost.read_bytes() == before  # nothing was written into the removed file

        await newer.append([result("new-2")])
        await newer.aclose()
        events = await second.read("r")
    assert isinstance(events[0], RunStarted)
    assert events[0].manifest.model == "second"
    assert call_ids(events) == ["new-1", "new-2"]


@IO_PATHS
async def test_a_journal_replaced_while_held_breaks_its_handle(
    tmp_path: pathlib.Path, io_uring: bool, watch: str
) -> None:
    async with FileStore(tmp_path, redact=None, io_uring=io_uring) as store:
        held = await store.create("r", [started("first")])
        other = tmp_path / "other"
        other.write_bytes(b"not this run's journal")
        os.replace(other, held.path)  # another file in its place
        await loop_polls()
        with pytest.raises(JournalBrokenError) as info:
            await held.append([result("x")])
        assert isinstance(info.value, JournalRemovedError)
        await held.aclose()
    assert pathlib.Path(tmp_path / "runs" / "r.journal").read_bytes() == b"not this run's journal"


class ReplacingBeforeLock(FileOps):
    """Swaps the journal for a copy of itself just before the first ``lock``: what a process
    that replaced the file between this opener's ``open`` and its ``lock`` leaves."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.swapped = False

    def lock(self, fd: int) -> bool:
        if not self.swapped:
            self.swapped = True
            copy = self.path + ".copy"
            with open(self.path, "rb") as src, open(copy, "wb") as dst:
                dst.write(src.read())
            os.replace(copy, self.path)
        return super().lock(fd)


async def test_open_locks_the_file_the_path_names_when_it_has_the_lock(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path, redact=None) as store:
        journal = await store.create("r", [started("first")])
        await journal.append([result("a")])
        await journal.aclose()
    ops = ReplacingBeforeLock(str(tmp_path / "runs" / "r.journal"))
    async with FileStore(tmp_path, redact=None, file_ops=ops) as store:
        journal = await store.open("r")
        assert ops.swapped
        await journal.append([result("b")])  # into the file the path names, not the old one
        await journal.aclose()
        assert call_ids(await store.read("r")) == ["a", "b"]


async def test_appends_to_a_watched_journal_make_no_stat(tmp_path: pathlib.Path) -> None:
    """The name is looked at only once the watch saw it change: a stat of the journal before
    each batch would cost 15-30% of its appends here (see ``tether.journal._watch``)."""
    faults = FaultyFileOps()
    async with FileStore(tmp_path, redact=None, file_ops=faults) as store:
        journal = await store.create("r", [started("first")])
        before = faults.calls["stat"]
        for i in range(20):
            await journal.append([result(f"c{i}")])
        assert faults.calls["stat"] == before
        other = tmp_path / "other"
        other.write_bytes(b"x")
        os.replace(other, journal.path)
        await loop_polls()
        with pytest.raises(JournalRemovedError):
            await journal.append([result("late")])
        assert faults.calls["stat"] > before
        await journal.aclose()
