"""``FileStore``: creating, opening, reading and listing runs, locking, closing, the layout."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether import (
    InvalidRunIdError,
    JournalClosedError,
    JournalIOError,
    JournalLockedError,
    RunExistsError,
    RunNotFoundError,
    TetherError,
)
from tether.journal import (
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolStarted,
    check_run_id,
    verify_file,
)
from tether.journal._format import HEADER_SIZE
from tether.journal._records import Signal, check_types
from tether.testing import FaultyFileOps


def started(run_id: str) -> RunStarted:
    return RunStarted(
        run_id=run_id,
        manifest=Manifest(model="test-model"),
        messages=[{"role": "user", "content": "hello"}],
    )


def reply(text: str) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": text})


@pytest.fixture
async def store(tmp_path: pathlib.Path) -> AsyncIterator[FileStore]:
    async with FileStore(tmp_path) as s:
        yield s


# --- create, open, read, list, exists ----------------------------------------------------------


async def test_create_writes_its_first_events_with_one_sync(tmp_path: pathlib.Path) -> None:
    ops = FaultyFileOps()
    async with FileStore(tmp_path, file_ops=ops) as store:
        before = ops.calls
        journal = await store.create("run-1", [started("run-1"), reply("hi")])
        made = ops.calls - before
        assert (made["pwrite"], made["fsync"] + made["fdatasync"], made["fsync_dir"]) == (1, 1, 1)
        assert [e.seq for e in journal.events] == [0, 1]
        before = ops.calls
        await journal.aclose()
        closed = ops.calls - before
        # the trim of the preallocated zeros is not synced: zeros read as the end of data
        assert (closed["ftruncate"], closed["fsync"] + closed["fdatasync"]) == (1, 0)
    assert len(verify_file(journal.path).events) == 2


async def test_create_then_reopen_round_trips(store: FileStore, tmp_path: pathlib.Path) -> None:
    journal = await store.create("run-1", [started("run-1")])
    assert journal.run_id == "run-1"
    assert journal.path == str(tmp_path / "runs" / "run-1.journal")
    assert [e.seq for e in journal.events] == [0]
    appended = await journal.append([reply("a"), reply("b")])
    assert [e.seq for e in appended] == [1, 2]
    assert all(e.at > 0 for e in appended)
    assert journal.next_seq == 3
    written = list(journal.events)
    await journal.aclose()

    assert await store.read("run-1") == written
    async with await store.open("run-1") as again:
        assert again.events == written
        assert again.next_seq == 3
        [more] = await again.append([reply("c")])
        assert more.seq == 3


async def test_create_without_events_is_an_empty_run(store: FileStore) -> None:
    async with await store.create("empty") as journal:
        assert journal.events == []
        assert journal.next_seq == 0
        assert journal.size == HEADER_SIZE
        assert await journal.append([]) == []
    assert await store.read("empty") == []


async def test_list_runs_and_exists(store: FileStore) -> None:
    assert await store.list_runs() == []
    for run_id in ("b-2", "a.1", "C_3"):
        await (await store.create(run_id)).aclose()
    assert await store.list_runs() == ["C_3", "a.1", "b-2"]
    assert await store.exists("a.1")
    assert not await store.exists("zzz")


async def test_duplicate_create_is_refused(store: FileStore) -> None:
    journal = await store.create("dup", [started("dup")])
    await journal.aclose()
    with pytest.raises(RunExistsError) as info:
        await store.create("dup")
    assert info.value.run_id == "dup"
    assert isinstance(info.value, TetherError)
    assert len(await store.read("dup")) == 1  # the first run is untouched


async def test_concurrent_creates_of_one_id_exactly_one_wins(store: FileStore) -> None:
    results = await asyncio.gather(
        *(store.create("same", [started("same")]) for _ in range(8)), return_exceptions=True
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, RunExistsError) for r in losers), losers
    await winners[0].aclose()
    assert len(await store.read("same")) == 1
    assert [p.name for p in pathlib.Path(store.runs_dir).iterdir()] == ["same.journal"]


async def test_missing_run(store: FileStore) -> None:
    with pytest.raises(RunNotFoundError) as info:
        await store.open("nope")
    assert info.value.run_id == "nope"
    assert isinstance(info.value, LookupError)
    with pytest.raises(RunNotFoundError):
        await store.read("nope")


async def test_store_must_be_entered(tmp_path: pathlib.Path) -> None:
    store = FileStore(tmp_path)
    with pytest.raises(RuntimeError, match="context manager"):
        await store.create("r")
    with pytest.raises(RuntimeError, match="context manager"):
        await store.open("r")


async def test_create_after_store_close_is_refused(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store:
        pass
    try:
        journal = await store.create("late")
    except RuntimeError:
        pass
    else:  # its appends cannot be synced: the writer threads are gone
        await journal.aclose()
        pytest.fail("create() on a closed store returned a journal")
    assert not (tmp_path / "runs" / "late.journal").exists()


# --- run ids -----------------------------------------------------------------------------------

INVALID_IDS: list[Any] = [
    "../x",
    "",
    "a/b",
    ".hidden",
    ".",
    "..",
    "x" * 129,
    "a\x00b",
    "caf\u00e9",
    "\u0662",  # an Arabic-Indic digit: str.isdigit() says yes, a run id says no
    "run\n",
    "a b",
    "-leading-dash",
    None,
    42,
    b"bytes",
]


@pytest.mark.parametrize("bad", INVALID_IDS, ids=repr)
async def test_invalid_run_ids_are_refused_everywhere(store: FileStore, bad: Any) -> None:
    with pytest.raises(InvalidRunIdError):
        check_run_id(bad)
    with pytest.raises(InvalidRunIdError):
        await store.create(bad)
    with pytest.raises(InvalidRunIdError):
        await store.open(bad)
    with pytest.raises(InvalidRunIdError):
        await store.read(bad)
    with pytest.raises(InvalidRunIdError):
        await store.exists(bad)
    with pytest.raises(ValueError, match="invalid run id"):  # InvalidRunIdError is a ValueError too
        store.location(bad)
    assert await store.list_runs() == []
    assert os.listdir(store.runs_dir) == []


@pytest.mark.parametrize("good", ["a", "0", "Run-1.retry_2", "x" * 128])
async def test_valid_run_ids(store: FileStore, good: str) -> None:
    assert check_run_id(good) == good
    await (await store.create(good)).aclose()
    assert await store.list_runs() == [good]
    assert store.location(good) == os.path.join(store.runs_dir, f"{good}.journal")


# --- locking and closing -----------------------------------------------------------------------


async def test_second_open_in_one_process_is_locked(store: FileStore) -> None:
    first = await store.create("r", [started("r")])

    async def open_it() -> None:
        await store.open("r")

    with pytest.raises(JournalLockedError) as info:
        await asyncio.create_task(open_it())
    assert info.value.path == first.path
    await first.aclose()
    second = await store.open("r")  # released on close
    with pytest.raises(JournalLockedError):
        await store.open("r")
    await second.aclose()


async def test_lock_is_held_against_other_descriptors(store: FileStore) -> None:
    journal = await store.create("r")
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        await journal.aclose()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


async def test_aclose_is_idempotent_and_appends_after_close_fail(store: FileStore) -> None:
    journal = await store.create("r", [started("r")])
    await journal.aclose()
    await journal.aclose()
    with pytest.raises(JournalClosedError) as info:
        await journal.append([reply("late")])
    assert info.value.path == journal.path
    assert len(await store.read("r")) == 1


async def test_context_manager_closes_the_journal(store: FileStore) -> None:
    async with await store.create("r") as journal:
        await journal.append([started("r")])
    with pytest.raises(JournalClosedError):
        await journal.append([reply("late")])


async def test_store_aclose_closes_journals_left_open(tmp_path: pathlib.Path) -> None:
    async with FileStore(tmp_path) as store:
        journals = [await store.create(f"r{i}", [started(f"r{i}")]) for i in range(3)]
    for journal in journals:
        with pytest.raises(JournalClosedError):
            await journal.append([reply("late")])
        assert os.path.getsize(journal.path) == journal.size
    await store.aclose()  # idempotent
    async with FileStore(tmp_path) as store:
        for i in range(3):
            await (await store.open(f"r{i}")).aclose()


# --- appending ---------------------------------------------------------------------------------


async def test_concurrent_appends_get_contiguous_seqs_in_call_order(store: FileStore) -> None:
    journal = await store.create("r", [started("r")])
    groups: list[list[Event]] = [
        [ToolStarted(call_id=f"c{i}-{j}") for j in range(i % 3 + 1)] for i in range(20)
    ]
    results = await asyncio.gather(*(journal.append(g) for g in groups))
    seq = 1
    for group, stamped in zip(groups, results, strict=True):
        assert [e.seq for e in stamped] == list(range(seq, seq + len(group)))
        assert [getattr(e, "call_id", None) for e in stamped] == [
            getattr(e, "call_id", None) for e in group
        ]
        seq += len(group)
    assert journal.next_seq == seq
    assert [e.seq for e in journal.events] == list(range(seq))
    await journal.aclose()
    assert await store.read("r") == journal.events


async def test_events_property_tracks_appends(store: FileStore) -> None:
    journal = await store.create("r", [started("r")])
    [a] = await journal.append([reply("a")])
    assert journal.events[-1] == a
    assert len(journal.events) == 2
    await journal.aclose()
    async with await store.open("r") as again:
        assert again.events == journal.events


async def test_read_while_a_writer_is_open_sees_acked_events(store: FileStore) -> None:
    journal = await store.create("r", [started("r")])
    for i in range(5):
        await journal.append([reply(str(i))])
        assert await store.read("r") == journal.events
    assert os.path.getsize(journal.path) > journal.size  # preallocated zeros are skipped
    await journal.aclose()


async def test_preallocated_zeros_are_trimmed_on_close(store: FileStore) -> None:
    journal = await store.create("r", [started("r")])
    for i in range(50):
        await journal.append([reply("z" * (i * 10))])
    await journal.append([reply("big" * 30_000)])  # a large write extends the file exactly
    await journal.append([reply("after")])
    assert os.path.getsize(journal.path) > journal.size
    await journal.aclose()
    assert os.path.getsize(journal.path) == journal.size
    result = verify_file(journal.path)
    assert result.end == journal.size
    assert result.events == journal.events


# --- the directory layout and creation leftovers -----------------------------------------------


async def test_directory_layout(store: FileStore, tmp_path: pathlib.Path) -> None:
    assert store.root == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blobs", "runs"]
    await (await store.create("run-1")).aclose()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["run-1.journal"]
    assert store.location("run-1") == str(tmp_path / "runs" / "run-1.journal")
    header = (tmp_path / "runs" / "run-1.journal").read_bytes()
    assert header.startswith(b"TETHERJ\x00")
    assert len(header) == HEADER_SIZE


async def test_relative_root_is_made_absolute(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with FileStore("nested/store") as store:
        assert store.root == str(tmp_path / "nested" / "store")
        await (await store.create("r")).aclose()
    assert (tmp_path / "nested" / "store" / "runs" / "r.journal").exists()


async def test_stale_creation_leftovers_are_removed_on_enter(tmp_path: pathlib.Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    stale = runs / ".r.123.456.tmp"
    fresh = runs / ".s.123.789.tmp"
    held = runs / ".t.123.999.tmp"
    for p in (stale, fresh, held):
        p.write_bytes(b"partial header")
    os.utime(stale, (0, 0))
    os.utime(held, (0, 0))
    fd = os.open(held, os.O_RDONLY)  # a creator that is still alive holds its lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        async with FileStore(tmp_path) as store:
            assert await store.list_runs() == []
            names = sorted(p.name for p in runs.iterdir())
            assert names == [fresh.name, held.name]
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("payload", "said"),
    [("a\ud800b", "not valid Unicode"), (2**70, "beyond 64 bits"), (-(2**64), "beyond 64 bits")],
)
def test_a_record_no_journal_can_encode_is_refused_as_a_bad_value(payload: Any, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        check_types(Signal(name="paid", signal_id="s1", payload=payload, by=""), "a signal")


async def test_a_run_the_os_will_not_say_is_there_is_not_taken_for_absent(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "runs").write_text("a file where the runs directory goes")
    store = FileStore(tmp_path)
    with pytest.raises(JournalIOError, match="Not a directory"):
        await store.exists("r1")
    assert not await FileStore(tmp_path / "elsewhere").exists("r1")
