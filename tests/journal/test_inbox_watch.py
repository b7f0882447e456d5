"""A store's watch of its directory says when a run's inbox may have changed.

A supervisor asks before each model or tool call whether a cancellation waits in the inbox of
the run it advances. ``FileStore.inbox_mark`` lets it skip the look (an ``lstat`` per call)
while nothing changed: the mark must move at every change to the inbox, whoever makes it (a
post from another process, one killed halfway, a clear), and may stay put for anything else
(appends to journals, new runs). The property checked here is the one the supervisor relies on:
a mark that did not move since a look means the inbox holds what that look found.
"""

from __future__ import annotations

import pathlib
import sys

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.journal import Decision, FileStore, Manifest, RunStarted, ToolResult

from .test_removed import loop_polls

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")

RUN = "r"
REPO = pathlib.Path(__file__).resolve().parents[2]


def decision(n: int) -> Decision:
    return Decision(call_id=f"toolu_{n}", approved=True, by=f"person {n}")


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])


async def test_a_post_from_another_store_moves_the_mark_and_wakes_inbox_changed(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])
        first = store.inbox_mark(RUN)
        assert first is not None
        await loop_polls()
        assert store.inbox_mark(RUN) == first
        woke = anyio.Event()

        async def wait_for_news() -> None:
            await store.inbox_changed()
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_news)
            async with FileStore(tmp_path) as other:  # its own descriptors, as a process has
                await other.post(RUN, decision(1))
            with anyio.fail_after(10):
                await woke.wait()
        assert store.inbox_mark(RUN) != first
        await journal.aclose()


async def test_appends_and_new_runs_leave_the_mark_where_it_is(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])
        await loop_polls()
        mark = store.inbox_mark(RUN)
        for i in range(20):
            await journal.append([ToolResult(call_id=f"toolu_{i}", ok=True, content=i)])
        other = await store.create("s", [started("s")])
        await other.aclose()
        await loop_polls()
        assert store.inbox_mark(RUN) == mark
        await journal.aclose()


async def test_a_clear_moves_the_mark(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])
        async with FileStore(tmp_path) as other:
            await other.post(RUN, decision(1))
            await other.post(RUN, decision(2))
        await loop_polls()
        mark = store.inbox_mark(RUN)
        await store.clear_inbox(RUN, 1)  # a replace: renamed over the inbox
        await loop_polls()
        after_replace = store.inbox_mark(RUN)
        assert after_replace != mark
        await store.clear_inbox(RUN, 1)  # the last one: the inbox is removed
        await loop_polls()
        assert store.inbox_mark(RUN) != after_replace
        await journal.aclose()


def test_a_poster_killed_halfway_moves_the_mark(tmp_path: pathlib.Path) -> None:
    """A post cut short by SIGKILL still tells the holder to look: the kernel closes the dead
    process's descriptor, and the close of a file written to is watched."""

    async def main() -> None:
        async with FileStore(tmp_path) as store:
            journal = await store.create(RUN, [started(RUN)])
            async with FileStore(tmp_path) as other:  # the inbox exists: no IN_CREATE now
                await other.post(RUN, decision(1))
            await loop_polls()
            mark = store.inbox_mark(RUN)
            proc = await anyio.run_process(
                [sys.executable, "-m", "tests.journal._inbox_proc", "post", str(tmp_path), RUN],
                cwd=REPO,
                check=False,
            )
            assert proc.returncode == -9, proc.stderr
            await loop_polls()
            assert store.inbox_mark(RUN) != mark
            await journal.aclose()

    anyio.run(main)


async def test_without_a_watch_there_is_no_mark(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    async with FileStore(tmp_path) as store:
        assert store.inbox_mark(RUN) is None


async def test_a_store_opened_again_gives_new_marks(tmp_path: pathlib.Path) -> None:
    """A mark from an earlier opening never matches one of a later: what changed while the store
    was closed was not watched."""
    store = FileStore(tmp_path)
    async with store:
        before = store.inbox_mark(RUN)
    async with store:
        assert store.inbox_mark(RUN) != before


OPS = st.lists(
    st.sampled_from(["post", "clear one", "clear all", "append", "new run", "nothing"]),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_an_unmoved_mark_means_an_unchanged_inbox(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str]
) -> None:
    root = tmp_path_factory.mktemp("store")

    async def main() -> None:
        async with FileStore(root) as store, FileStore(root) as other:
            journal = await store.create(RUN, [started(RUN)])
            posted = 0
            looked_mark = store.inbox_mark(RUN)
            looked = await store.peek_inbox(RUN)
            for i, op in enumerate(ops):
                if op == "post":
                    posted += 1
                    await other.post(RUN, decision(posted))
                elif op == "clear one" and await store.has_inbox(RUN):
                    await store.clear_inbox(RUN, 1)
                elif op == "clear all" and await store.has_inbox(RUN):
                    await store.clear_inbox(RUN, len(await store.peek_inbox(RUN)))
                elif op == "append":
                    await journal.append([ToolResult(call_id=f"toolu_{i}", ok=True, content=i)])
                elif op == "new run":
                    await (await store.create(f"s{i}", [started(f"s{i}")])).aclose()
                await loop_polls()
                mark = store.inbox_mark(RUN)
                now = await store.peek_inbox(RUN)
                if mark == looked_mark:
                    assert now == looked, f"after {ops[: i + 1]} the inbox changed, the mark not"
                looked_mark, looked = mark, now
            await journal.aclose()

    anyio.run(main)


async def test_news_that_came_while_nobody_waited_is_not_lost(tmp_path: pathlib.Path) -> None:
    """``inbox_changed(since)`` returns at once when an inbox changed after ``inbox_news``
    was ``since``: a holder busy looking when a cancellation came still wakes for it."""
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])
        since = store.inbox_news()
        async with FileStore(tmp_path) as other:
            await other.post(RUN, decision(1))
        await loop_polls()
        with anyio.fail_after(5):
            await store.inbox_changed(since)
        with anyio.move_on_after(0.2) as waited:  # nothing new since: it waits
            await store.inbox_changed(store.inbox_news())
        assert waited.cancelled_caught
        await journal.aclose()


async def test_a_watch_whose_directory_went_moves_every_mark_at_every_look(
    tmp_path: pathlib.Path,
) -> None:
    """``runs/`` renamed away: the watch follows an inode the path no longer names, so no mark
    may hold still (each call looks, as without a watch)."""
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])
        (tmp_path / "runs").rename(tmp_path / "runs.moved")
        await loop_polls()
        assert store.inbox_mark(RUN) != store.inbox_mark(RUN)
        (tmp_path / "runs.moved").rename(tmp_path / "runs")
        await journal.aclose()


async def test_an_inbox_that_cannot_be_looked_at_is_an_error_not_none(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look refused by the system (EACCES, a seccomp profile's EPERM) must not read as "no
    inbox": the caller logs it and looks again, and nothing is taken as absent."""
    async with FileStore(tmp_path) as store:
        journal = await store.create(RUN, [started(RUN)])

        def refused(*args: object, **kwargs: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr("tether.journal._store.os.lstat", refused)
        with pytest.raises(PermissionError):
            await store.inbox_versions([RUN])
        monkeypatch.undo()
        await journal.aclose()
