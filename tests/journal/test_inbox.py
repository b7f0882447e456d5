"""A run's inbox keeps every answer it acknowledged: through torn posts, kills, damage and a
full disk.

Answers are queued with ``FileStore.post`` while another process holds the run's journal; the
owner takes them (oldest first) and clears the ones it recorded. Each test below breaks the
inbox the way the world does (a post cut short, a process killed mid-write or mid-clear, a
flipped byte, a full filesystem) and checks that every answer that was acknowledged is still
taken, and that the next answer is too.
"""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import JournalIOError, JournalVersionError
from tether.journal import AnyEvent, Decision, Event, FileStore, Manifest, RunStarted
from tether.journal._format import HEADER_SIZE
from tether.journal._inbox import (
    INBOX_MAGIC,
    INBOX_VERSION,
    frame_record,
    inbox_header,
    scan_inbox,
)
from tether.journal._store import INLINE_LOOKS
from tether.journal.lowlevel import FileOps

from .._disk import fill_disk
from .test_properties import EVENTS

RUN = "run-inbox"
REPO = pathlib.Path(__file__).resolve().parents[2]


def answer(by: str, note: str = "") -> Decision:
    return Decision(call_id="toolu_1", approved=True, by=by, note=note)


def who(events: list[AnyEvent]) -> list[str]:
    return [e.by if isinstance(e, Decision) else type(e).__name__ for e in events]


async def new_run(store: FileStore, run_id: str = RUN) -> None:
    started = RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])
    await (await store.create(run_id, [started])).aclose()


def inbox_of(root: pathlib.Path, run_id: str = RUN) -> pathlib.Path:
    return root / "runs" / f"{run_id}.inbox"


def side_files(root: pathlib.Path) -> list[str]:
    return sorted(n for n in os.listdir(root / "runs") if ".inbox." in n)


# --- posting, taking, clearing -------------------------------------------------------------


async def test_take_returns_answers_oldest_first_and_clear_keeps_those_posted_since(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store:
        await new_run(store)
        assert await store.take_inbox(RUN) == []
        for name in ("ann", "bob", "cy"):
            await store.post(RUN, answer(name))
        taken = await store.take_inbox(RUN)
        assert who(taken) == ["ann", "bob", "cy"]
        assert all(e.seq == -1 for e in taken)  # stamped only when the owner records them
        await store.post(RUN, answer("dee"))  # after the take, before the clear
        await store.clear_inbox(RUN, len(taken))
        assert who(await store.take_inbox(RUN)) == ["dee"]
        assert await store.has_inbox(RUN)
        await store.clear_inbox(RUN, 1)
        assert not await store.has_inbox(RUN)
        assert await store.take_inbox(RUN) == []
    assert os.listdir(tmp_path / "runs") == [f"{RUN}.journal"]


@pytest.mark.parametrize("runs", [3, INLINE_LOOKS + 6], ids=["on the loop", "in a thread"])
async def test_inbox_versions_name_the_runs_with_answers_and_change_with_each_post(
    tmp_path: pathlib.Path, runs: int
) -> None:
    """A few runs are looked at on the event loop (by name in the open ``runs/``), many in a
    thread (by path): either way only regular inboxes count, and a post changes the version."""
    ids = [f"run-{i:03d}" for i in range(runs)]
    async with FileStore(tmp_path) as store:
        for run_id in ids:
            await new_run(store, run_id)
        assert await store.inbox_versions(ids) == {}
        await store.post(ids[0], answer("ann"))
        await store.post(ids[-1], answer("bob"))
        os.mkdir(inbox_of(tmp_path, ids[1]))  # not a regular file: no answers in it
        first = await store.inbox_versions(ids)
        assert sorted(first) == [ids[0], ids[-1]]
        await store.post(ids[0], answer("cy"))
        again = await store.inbox_versions(ids)
        assert again[ids[0]] != first[ids[0]]
        assert again[ids[-1]] == first[ids[-1]]
        assert await store.inbox_versions(ids[:1]) == {ids[0]: again[ids[0]]}


async def test_an_append_unless_queued_appends_under_the_inbox_and_leaves_no_inbox(
    tmp_path: pathlib.Path,
) -> None:
    """The journal's holder appends an answer under the inbox's lock: with nothing queued it
    is appended, and the inbox made to be locked is gone again; with an answer waiting,
    nothing is appended."""
    async with FileStore(tmp_path) as store:
        await new_run(store)
        async with await store.open(RUN) as journal:
            written = await store.append_unless_queued(journal, [answer("ann")], at=1.0)
            assert written is not None
            assert who(written) == ["ann"]
            assert written[0].seq == 1
            assert not inbox_of(tmp_path).exists()
            await store.post(RUN, answer("bob"))
            assert await store.append_unless_queued(journal, [answer("cy")]) is None
            assert journal.next_seq == 2
        assert who((await store.read(RUN))[1:]) == ["ann"]
        assert who(await store.take_inbox(RUN)) == ["bob"]


async def test_a_post_waits_for_an_append_under_the_inbox(tmp_path: pathlib.Path) -> None:
    """A post that comes while the holder appends under the inbox's lock reads the journal
    once the append is in it (the post is checked against it), never before."""
    slow = SlowWrites()
    async with FileStore(tmp_path, file_ops=slow, io_uring=False) as store:
        await new_run(store)
        seen: list[list[str]] = []

        def choose(events: list[AnyEvent], queued: list[AnyEvent]) -> Event | None:
            seen.append(who(events[1:]))
            return answer("bob")

        async with await store.open(RUN) as journal, anyio.create_task_group() as tg:
            slow.armed = True
            tg.start_soon(store.append_unless_queued, journal, [answer("ann")])
            await anyio.to_thread.run_sync(slow.writing.wait)  # under the lock, being written
            tg.start_soon(store.post_checked, RUN, choose)
            await anyio.to_thread.run_sync(slow.refused.wait)  # the post waits for the lock
            slow.go.set()
        assert seen == [["ann"]]
        assert who(await store.take_inbox(RUN)) == ["bob"]


class SlowWrites(FileOps):
    """Holds the first journal write, once ``armed``, until ``go`` is set; ``refused`` is set
    when a lock is refused while it is held."""

    def __init__(self) -> None:
        self.armed = False
        self.writing, self.go, self.refused = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )

    def write_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        if self.armed and not os.readlink(f"/proc/self/fd/{fd}").endswith(".inbox"):
            self.armed = False
            self.writing.set()
            self.go.wait(30)
        super().write_all(fd, data, offset)

    def lock(self, fd: int) -> bool:
        taken = super().lock(fd)
        if not taken and self.writing.is_set():
            self.refused.set()
        return taken


async def test_an_empty_inbox_left_by_a_killed_process_reads_as_none(
    tmp_path: pathlib.Path,
) -> None:
    """A process killed while it held the inbox it made to be locked leaves it empty: no run
    is taken for one with answers waiting, and the next post writes into it."""
    async with FileStore(tmp_path) as store:
        await new_run(store)
        inbox_of(tmp_path).touch(mode=0o600)
        assert not await store.has_inbox(RUN)
        assert await store.inbox_versions([RUN]) == {}
        assert not (await store.run_stats())[RUN].inbox
        await store.post(RUN, answer("ann"))
        assert await store.has_inbox(RUN)
        assert (await store.run_stats())[RUN].inbox
        assert who(await store.take_inbox(RUN)) == ["ann"]


async def test_the_inbox_is_framed_like_a_journal_under_its_own_magic(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store:
        await new_run(store)
        await store.post(RUN, answer("ann"))
        await store.post(RUN, answer("bob"))
    data = inbox_of(tmp_path).read_bytes()
    assert data[:8] == INBOX_MAGIC
    assert data == inbox_header(RUN) + frame_record(answer("ann")) + frame_record(answer("bob"))


async def test_a_torn_record_left_by_hand_is_cut_back_and_the_next_answer_is_taken(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a post cut short leaves: its first bytes, and nothing after. Taken from the bytes a
    # real post appends, so that the test does not depend on the layout.
    async with FileStore(tmp_path) as store:
        await new_run(store)
        path = inbox_of(tmp_path)
        await store.post(RUN, answer("ann"))
        whole = path.read_bytes()
        await store.post(RUN, answer("never-acknowledged"))
        grown = path.read_bytes()
        torn = grown[: len(whole) + (len(grown) - len(whole)) // 2]
        path.write_bytes(torn)
        assert who(await store.take_inbox(RUN)) == ["ann"]  # a torn tail is not an answer

        await store.post(RUN, answer("bob"))
        assert who(await store.take_inbox(RUN)) == ["ann", "bob"]
    assert side_files(tmp_path) == [f"{RUN}.inbox.torn-{len(whole)}"]
    # The poster that cut it says so: the cut bytes may have been an answer damaged after it
    # was queued, which a person should know of.
    said = [r.getMessage() for r in caplog.records if "do not read as one" in r.getMessage()]
    assert len(said) == 1
    assert f"kept in {path}.torn-{len(whole)}" in said[0]
    assert (tmp_path / "runs" / side_files(tmp_path)[0]).read_bytes() == torn[len(whole) :]


async def test_damage_in_the_middle_is_reported_and_the_answers_after_it_are_taken(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FileStore(tmp_path) as store:
        await new_run(store)
        for name in ("ann", "bob", "cy"):
            await store.post(RUN, answer(name))
        path = inbox_of(tmp_path)
        data = bytearray(path.read_bytes())
        second = HEADER_SIZE + len(frame_record(answer("ann")))
        data[second + 20] ^= 0x40  # a flipped bit in bob's answer
        path.write_bytes(bytes(data))

        with caplog.at_level(logging.ERROR, logger="tether.journal"):
            taken = await store.take_inbox(RUN)
        assert who(taken) == ["ann", "cy"]
        assert f"{path}: damaged at offset {second}" in caplog.text
        assert "checksum mismatch" in caplog.text

        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="tether.journal"):
            await store.clear_inbox(RUN, len(taken))
        broken = tmp_path / "runs" / f"{RUN}.inbox.broken"
        assert f"the whole inbox is kept in {broken}" in caplog.text
        assert broken.read_bytes() == bytes(data)  # the damaged answer's bytes, for a person
        assert not await store.has_inbox(RUN)


@pytest.mark.parametrize("short", [b"garbage, not an inbox\n", b"TETHER"], ids=["garbage", "torn"])
async def test_a_short_inbox_is_kept_when_it_is_not_a_torn_first_post(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, short: bytes
) -> None:
    """Fewer bytes than a header: the start of a header is a first post cut short (nothing in
    it was acknowledged), dropped; anything else is kept whole in ``.broken`` for a person."""
    async with FileStore(tmp_path) as store:
        await new_run(store)
        path = inbox_of(tmp_path)
        path.write_bytes(short)
        with caplog.at_level(logging.ERROR, logger="tether.journal"):
            assert await store.take_inbox(RUN) == []
            await store.clear_inbox(RUN, 0)
        assert not await store.has_inbox(RUN)
        broken = tmp_path / "runs" / f"{RUN}.inbox.broken"
        if short.startswith(b"TETHER"):
            assert not broken.exists()
        else:
            assert broken.read_bytes() == short
            assert "not an inbox (22 bytes, no header)" in caplog.text


async def test_a_newer_inbox_is_refused_not_rewritten(tmp_path: pathlib.Path) -> None:
    from tether.journal._format import encode_header

    async with FileStore(tmp_path) as store:
        await new_run(store)
        path = inbox_of(tmp_path)
        newer = encode_header(RUN, INBOX_VERSION + 1, INBOX_MAGIC) + b"\x01" * 64
        path.write_bytes(newer)
        with pytest.raises(JournalVersionError):
            await store.take_inbox(RUN)
        with pytest.raises(JournalVersionError):
            await store.post(RUN, answer("ann"))
        with pytest.raises(JournalVersionError):
            await store.clear_inbox(RUN, 1)
    assert path.read_bytes() == newer


async def test_an_inbox_of_json_lines_from_an_older_tether_is_still_delivered(
    tmp_path: pathlib.Path,
) -> None:
    import msgspec

    async with FileStore(tmp_path) as store:
        await new_run(store)
        path = inbox_of(tmp_path)
        lines = b"".join(msgspec.json.encode(answer(n)) + b"\n" for n in ("ann", "bob"))
        path.write_bytes(lines + b'{"type":"deci')  # and a line cut short
        assert who(await store.take_inbox(RUN)) == ["ann", "bob"]
        await store.post(RUN, answer("cy"))
        assert path.read_bytes()[:8] == INBOX_MAGIC  # rewritten in the framed layout
        assert who(await store.take_inbox(RUN)) == ["ann", "bob", "cy"]


def test_posts_racing_takes_and_clears_lose_no_answer(tmp_path: pathlib.Path) -> None:
    """Clear replaces or removes the inbox while posters wait for its lock: a post that then
    gets the lock of the old file must notice and write to the new one."""
    from tether.journal._inbox import clear, post, take

    (tmp_path / "runs").mkdir()
    path = str(tmp_path / "runs" / f"{RUN}.inbox")
    ops = FileOps()
    posters, per_poster = 4, 40
    done = threading.Event()

    def poster(n: int) -> None:
        for i in range(per_poster):
            post(path, RUN, answer(f"{n}-{i}"), ops)

    recorded: list[str] = []

    def owner() -> None:
        while True:
            finished = done.is_set()
            taken = take(path, RUN, ops)
            recorded.extend(who(taken))
            clear(path, RUN, len(taken), ops)
            if finished and not taken:
                return

    threads = [threading.Thread(target=poster, args=(n,)) for n in range(posters)]
    folding = threading.Thread(target=owner)
    folding.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    folding.join()
    expected = {f"{n}-{i}" for n in range(posters) for i in range(per_poster)}
    assert sorted(recorded) == sorted(expected)  # each exactly once
    for n in range(posters):  # and each poster's answers in the order it posted them
        mine = [r for r in recorded if r.startswith(f"{n}-")]
        assert mine == [f"{n}-{i}" for i in range(per_poster)]


# --- real crashes --------------------------------------------------------------------------


def _child(
    mode: str, root: pathlib.Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.journal._inbox_proc", mode, str(root), RUN, *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_post_killed_mid_write_loses_nothing_and_the_next_answer_is_taken(
    tmp_path: pathlib.Path,
) -> None:
    async def first() -> None:
        async with FileStore(tmp_path) as store:
            await new_run(store)
            await store.post(RUN, answer("ann"))

    anyio.run(first)
    before = inbox_of(tmp_path).stat().st_size
    killed = _child("post", tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert inbox_of(tmp_path).stat().st_size > before, "the kill left part of a record"

    async def after() -> None:
        async with FileStore(tmp_path) as store:
            assert who(await store.take_inbox(RUN)) == ["ann"]
            await store.post(RUN, answer("bob"))
            assert who(await store.take_inbox(RUN)) == ["ann", "bob"]

    anyio.run(after)


@pytest.mark.slow
def test_a_clear_killed_at_any_step_loses_no_answer_it_was_to_keep(
    tmp_path: pathlib.Path,
) -> None:
    """Five answers, the first two recorded by the owner: a clear killed at each of its file
    operations in turn (halfway through each write) leaves all five or the last three."""
    names = ["ann", "bob", "cy", "dee", "eve"]
    outcomes: dict[str, int] = {"all": 0, "kept": 0}
    kill_at = 0
    while True:
        kill_at += 1
        root = tmp_path / f"kill-{kill_at}"

        async def fill(root: pathlib.Path = root) -> None:
            async with FileStore(root) as store:
                await new_run(store)
                for name in names:
                    await store.post(RUN, answer(name))

        anyio.run(fill)
        child = _child("clear", root, "2", KILL_AT=str(kill_at))

        async def look(root: pathlib.Path = root) -> list[str]:
            async with FileStore(root) as store:
                return who(await store.take_inbox(RUN))

        left = anyio.run(look)
        if child.returncode == 0:
            assert child.stdout.strip() == "finished"
            assert left == names[2:]
            break
        assert child.returncode == -signal.SIGKILL, child.stderr
        assert left in (names, names[2:]), f"killed at operation {kill_at}: {left}"
        outcomes["all" if left == names else "kept"] += 1
    assert kill_at > 5  # the clear did several operations, each a kill point
    assert outcomes["all"] > 0
    assert outcomes["kept"] > 0  # killed after the rename, before the directory sync


# --- a full disk ---------------------------------------------------------------------------


async def test_a_post_on_a_full_disk_raises_and_loses_nothing(small_fs: pathlib.Path) -> None:
    root = small_fs / "store"
    async with FileStore(root) as store:
        await new_run(store)
        await store.post(RUN, answer("ann"))
        await store.post(RUN, answer("bob"))
        before = inbox_of(root).read_bytes()
        filler = fill_disk(small_fs)
        # Larger than the room left in the inbox's last block: part of it fits, then no more.
        big = answer("cy", note="n" * 9000)
        with pytest.raises(JournalIOError) as info:
            await store.post(RUN, big)
        assert info.value.errno == errno.ENOSPC
        assert "No space left on device" in str(info.value)
        assert info.value.path == str(inbox_of(root))
        assert inbox_of(root).read_bytes() == before  # no part of the refused answer
        assert who(await store.take_inbox(RUN)) == ["ann", "bob"]

        filler.unlink()
        await store.post(RUN, big)
        assert who(await store.take_inbox(RUN)) == ["ann", "bob", "cy"]
    assert side_files(root) == []


async def test_a_first_post_on_a_full_disk_leaves_no_inbox(small_fs: pathlib.Path) -> None:
    root = small_fs / "store"
    async with FileStore(root) as store:
        await new_run(store)
        filler = fill_disk(small_fs)
        with pytest.raises(JournalIOError):
            await store.post(RUN, answer("ann", note="n" * 9000))
        assert not await store.has_inbox(RUN)  # a sweep finds no answers that are not there
        filler.unlink()
        await store.post(RUN, answer("ann"))
        assert who(await store.take_inbox(RUN)) == ["ann"]


# --- the format, as properties --------------------------------------------------------------

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(events=st.lists(EVENTS, max_size=6))
def test_any_events_round_trip_through_an_inbox(events: list[Event]) -> None:
    data = inbox_header(RUN) + b"".join(frame_record(e) for e in events)
    found = scan_inbox(data, "mem", RUN)
    assert found.events == events
    assert found.damage == []
    assert found.end == len(data)


@PROPS
@given(data=st.binary(max_size=2048), with_header=st.booleans())
def test_scanning_arbitrary_bytes_raises_nothing_and_stays_in_bounds(
    data: bytes, with_header: bool
) -> None:
    if with_header:
        data = inbox_header(RUN) + data
    try:
        found = scan_inbox(data, "mem", RUN)
    except JournalVersionError:
        return
    assert 0 <= found.end <= len(data)
    assert all(0 <= offset < len(data) for offset, _ in found.damage)
    if not found.legacy:
        for record in found.records:
            assert record.raw in data
            assert scan_inbox(inbox_header(RUN) + record.raw, "mem", RUN).events == [record.event]


_NAMES = [f"op-{i}" for i in range(6)]
_RECORDS = [frame_record(answer(n)) for n in _NAMES]


@PROPS
@given(
    damaged=st.integers(0, len(_NAMES) - 1),
    at=st.integers(0, 10**6),
    value=st.integers(1, 255),
)
def test_one_damaged_record_hides_no_other(damaged: int, at: int, value: int) -> None:
    data = bytearray(inbox_header(RUN) + b"".join(_RECORDS))
    start = HEADER_SIZE + sum(len(r) for r in _RECORDS[:damaged])
    data[start + at % len(_RECORDS[damaged])] ^= value
    found = scan_inbox(bytes(data), "mem", RUN)
    others = [n for i, n in enumerate(_NAMES) if i != damaged]
    assert who(found.events) == others
    if damaged < len(_NAMES) - 1:
        assert [offset for offset, _ in found.damage] == [start]  # reported, where it is
    else:
        assert found.damage == []  # the last record: a torn tail, cut by the next post
        assert found.end == start
