"""Finished runs' summaries kept on disk: used only for a journal exactly as it was, and a file
that can be wrong (torn, flipped, another tether's) is ignored whole."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.journal import (
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolPin,
    ToolResult,
    ToolStarted,
)
from tether.operate import _listing, _summary_file
from tether.operate._listing import RACY_NS, Listing
from tether.operate._summary import RunSummary

REPO = pathlib.Path(__file__).resolve().parents[2]
FINISHED = [f"done-{i}" for i in range(5)]
PARKED = "parked"


def _events(run_id: str, *, finish: bool) -> list[Event]:
    use = {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"n": 1}}
    events: list[Event] = [
        RunStarted(
            run_id=run_id,
            manifest=Manifest(
                model="m", tools=[ToolPin(name="lookup", version="1", schema_hash="x")]
            ),
            messages=[{"role": "user", "content": f"about {run_id}"}],
        ),
        ModelResponse(message={"role": "assistant", "content": [use]}),
        ToolStarted(call_id="c1", name="lookup"),
        ToolResult(call_id="c1", ok=True, content="found"),
    ]
    if finish:
        events += [
            ModelResponse(message={"role": "assistant", "content": "all done"}),
            RunFinished(status="done"),
        ]
    return events


async def _make(root: pathlib.Path) -> None:
    async with FileStore(root) as store:
        for run_id in FINISHED:
            await (await store.create(run_id, _events(run_id, finish=True))).aclose()
        await (await store.create(PARKED, _events(PARKED, finish=False))).aclose()


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    anyio.run(_make, tmp_path)
    time.sleep(2 * RACY_NS / 1e9)  # past the window in which a journal's times are not trusted
    return tmp_path


async def _list(root: pathlib.Path) -> tuple[dict[str, str], int]:
    listing = Listing(FileStore(root), fresh_for=0)
    summaries = await listing.summaries()
    return {s.run_id: s.status for s in summaries}, listing.reads


async def test_a_new_listing_reads_only_what_no_listing_kept(root: pathlib.Path) -> None:
    first, reads = await _list(root)
    assert reads == len(FINISHED) + 1
    assert (root / _summary_file.NAME).stat().st_mode & 0o777 == 0o600
    again, reads = await _list(root)  # another process, say
    assert again == first
    assert reads == 1  # the unfinished run only


async def test_a_journal_changed_under_its_kept_summary_is_read_again(
    root: pathlib.Path,
) -> None:
    await _list(root)
    path = root / "runs" / f"{FINISHED[0]}.journal"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-9] ^= 0x01  # damage in place: same size, and the modification time set back
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    found, reads = await _list(root)
    assert reads == 2  # the changed journal, and the unfinished run
    assert found[FINISHED[0]] != "done"  # what the damaged journal says, not the kept summary


async def test_a_run_made_again_under_the_same_id_is_read_again(root: pathlib.Path) -> None:
    await _list(root)
    run_id = FINISHED[1]
    (root / "runs" / f"{run_id}.journal").unlink()
    async with FileStore(root) as store:  # the same events: the same size, another file
        await (await store.create(run_id, _events(run_id, finish=False))).aclose()
    _, reads = await _list(root)
    assert reads == 2
    time.sleep(2 * RACY_NS / 1e9)
    found, _ = await _list(root)
    assert found[run_id] == "running"


async def test_a_file_of_another_tether_or_other_modules_is_ignored(
    root: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _list(root)
    monkeypatch.setattr(_summary_file, "__version__", "0.0.0-other")
    _, reads = await _list(root)
    assert reads == len(FINISHED) + 1
    monkeypatch.undo()
    monkeypatch.setattr(_summary_file, "fingerprint", lambda: 12345)
    _, reads = await _list(root)
    assert reads == len(FINISHED) + 1


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_flipped_bit_or_torn_end_makes_the_whole_file_ignored(data: st.DataObject) -> None:
    summaries = anyio.run(_kept_now)
    blob = _summary_file.dump(summaries)
    assert _summary_file.parse(blob) == summaries
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(blob) * 8 - 1))
        broken = bytearray(blob)
        broken[at // 8] ^= 1 << (at % 8)
        assert _summary_file.parse(bytes(broken)) == {}
    else:
        cut = data.draw(st.integers(0, len(blob) - 1))
        assert _summary_file.parse(blob[:cut]) == {}


_KEPT: dict[str, tuple[_summary_file.Identity, RunSummary]] = {}


async def _kept_now() -> dict[str, tuple[_summary_file.Identity, RunSummary]]:
    if not _KEPT:
        with tempfile.TemporaryDirectory() as tmp:
            await _make(pathlib.Path(tmp))
            time.sleep(2 * RACY_NS / 1e9)
            await _list(pathlib.Path(tmp))
            _KEPT.update(_summary_file.load(tmp))
    assert _KEPT
    return dict(_KEPT)


async def test_a_listing_that_may_not_write_the_file_lists_all_the_same(
    root: pathlib.Path,
) -> None:
    (root / f"{_summary_file.NAME}.tmp").mkdir()  # nothing can be written through it
    first, _ = await _list(root)
    assert not (root / _summary_file.NAME).exists()
    again, reads = await _list(root)
    assert again == first
    assert reads == len(FINISHED) + 1


def test_tether_runs_prints_the_same_with_and_without_the_file(root: pathlib.Path) -> None:
    def runs() -> list[dict[str, object]]:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", "runs", "--root", str(root), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        found: list[dict[str, object]] = json.loads(done.stdout)
        for run in found:
            run.pop("age_s")
        return found

    cold = runs()
    assert (root / _summary_file.NAME).exists()
    assert runs() == cold
    assert [r["run_id"] for r in cold] == sorted([*FINISHED, PARKED])


async def _truth(root: pathlib.Path) -> list[dict[str, object]]:
    """Every run's summary as its journal says it, now (no file read, none written)."""
    listing = Listing(FileStore(root), fresh_for=0)
    listing.keeps_on_disk = False
    return [_plain(s) for s in await listing.summaries()]


async def _shown(root: pathlib.Path) -> tuple[list[dict[str, object]], int]:
    """What a new listing (a new process, say) shows, and how many journals it read."""
    listing = Listing(FileStore(root), fresh_for=0)
    return [_plain(s) for s in await listing.summaries()], listing.reads


def _plain(summary: RunSummary) -> dict[str, object]:
    shown = summary.as_dict(now=0.0)
    shown.pop("age_s")
    return shown


@pytest.mark.parametrize("cut", [0, 7, 12, 16, 100, -1])
async def test_a_file_cut_short_on_disk_is_ignored_and_written_again(
    root: pathlib.Path, cut: int
) -> None:
    await _list(root)
    path = root / _summary_file.NAME
    size = path.stat().st_size
    os.truncate(path, cut % size)
    shown, reads = await _shown(root)
    assert shown == await _truth(root)
    assert reads == len(FINISHED) + 1  # nothing taken from the torn file
    assert path.stat().st_size == size  # the next listing wrote it whole again
    _, reads = await _shown(root)
    assert reads == 1


@pytest.mark.parametrize("where", ["header", "body", "end"])
async def test_a_file_overwritten_on_disk_is_ignored(root: pathlib.Path, where: str) -> None:
    await _list(root)
    path = root / _summary_file.NAME
    data = bytearray(path.read_bytes())
    at = {"header": 10, "body": len(data) // 2, "end": len(data) - 1}[where]
    data[at : at + 4] = b"\xff\x00\xfe\x01"
    with open(path, "r+b") as f:  # in place: the same file, the same size
        f.write(bytes(data[: len(data)]))
    shown, reads = await _shown(root)
    assert shown == await _truth(root)
    assert reads == len(FINISHED) + 1


async def test_a_file_with_a_good_checksum_and_wrong_types_is_ignored(
    root: pathlib.Path,
) -> None:
    """A file made by hand (or by a buggy writer) checks out byte for byte, not field by field:
    nothing of it is shown."""
    await _list(root)
    path = root / _summary_file.NAME
    doc = msgspec.msgpack.decode(path.read_bytes()[16:])
    for entry in doc["runs"].values():
        entry[4][1] = 42  # a status that is not a string
    body = msgspec.msgpack.encode(doc)
    path.write_bytes(
        struct.pack("<8sII", _summary_file.MAGIC, _summary_file.FORMAT, zlib.crc32(body)) + body
    )
    assert _summary_file.load(str(root)) == {}
    shown, reads = await _shown(root)
    assert shown == await _truth(root)
    assert reads == len(FINISHED) + 1


def test_a_fifo_at_the_file_or_its_temporary_does_not_hold_tether_runs(
    root: pathlib.Path,
) -> None:
    """Opening a FIFO waits for its other end; the listing must not (it never opens one)."""
    for name in (_summary_file.NAME, f"{_summary_file.NAME}.tmp"):
        os.mkfifo(root / name)
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", "runs", "--root", str(root), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert sorted(r["run_id"] for r in json.loads(done.stdout)) == sorted([*FINISHED, PARKED])
        (root / name).unlink()


async def test_a_symlink_at_the_file_is_not_followed(
    root: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A link to another store's file (whose entries could match these journals' identities
    on another machine's copy) is not read."""
    await _list(root)
    elsewhere = tmp_path_factory.mktemp("elsewhere") / _summary_file.NAME
    (root / _summary_file.NAME).rename(elsewhere)
    (root / _summary_file.NAME).symlink_to(elsewhere)
    assert _summary_file.load(str(root)) == {}
    shown, reads = await _shown(root)
    assert shown == await _truth(root)
    assert reads == len(FINISHED) + 1


async def test_bytes_appended_to_a_finished_journal_are_what_is_shown(
    root: pathlib.Path,
) -> None:
    """A finished run's journal written to again (here a torn tail, as a crash mid-append
    leaves it) is read again, not taken from the file."""
    await _list(root)
    path = root / "runs" / f"{FINISHED[2]}.journal"
    with open(path, "ab") as f:
        f.write(b"\x00\x01torn")
    shown, reads = await _shown(root)
    assert reads == 2
    assert shown == await _truth(root)


async def test_a_run_removed_by_gc_is_not_shown_from_the_file(root: pathlib.Path) -> None:
    await _list(root)
    gone = FINISHED[3]
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "gc", "--root", str(root), "--keep-days", "0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not (root / "runs" / f"{gone}.journal").exists()
    shown, _ = await _shown(root)
    assert shown == await _truth(root)
    assert gone not in {s["run_id"] for s in shown}
    assert gone not in _summary_file.load(str(root))  # and the file forgot it


def test_two_processes_writing_the_file_at_once_never_leave_it_torn(
    root: pathlib.Path,
) -> None:
    """Writers racing over the file: every read of it gives what one writer wrote, whole (the
    rename is atomic, and no writer writes into a file already renamed over it)."""
    anyio.run(_list, root)
    kept = _summary_file.load(str(root))
    assert len(kept) == len(FINISHED)
    writer = (
        "import sys, time\n"
        "from tether.operate import _summary_file as f\n"
        "root, keep = sys.argv[1], int(sys.argv[2])\n"
        "kept = f.load(root)\n"
        "subset = dict(list(sorted(kept.items()))[:keep])\n"
        "end = time.monotonic() + 3\n"
        "while time.monotonic() < end:\n"
        "    f.save(root, subset)\n"
    )
    subsets = {n: dict(sorted(kept.items())[:n]) for n in range(1, len(FINISHED) + 1)}
    procs = [
        subprocess.Popen([sys.executable, "-c", writer, str(root), str(n)], cwd=REPO)
        for n in subsets
    ]
    reads = 0
    try:
        while any(p.poll() is None for p in procs):
            seen = _summary_file.load(str(root))
            assert seen in subsets.values(), f"a read gave {len(seen)} entries, none a writer's"
            reads += 1
    finally:
        for p in procs:
            p.wait(timeout=60)
    assert all(p.returncode == 0 for p in procs)
    assert reads > 10
    assert _summary_file.load(str(root)) in subsets.values()


async def test_a_kept_summary_is_equal_to_the_one_it_was_made_from(root: pathlib.Path) -> None:
    """Field for field and type for type (the pinned tools are tuples again, not lists)."""
    listing = Listing(FileStore(root), fresh_for=0)
    made = {s.run_id: s for s in await listing.summaries() if s.finished}
    kept = {run_id: summary for run_id, (_, summary) in _summary_file.load(str(root)).items()}
    assert kept == made
    assert all(s.tools == (("lookup", "1"),) for s in kept.values())
    assert len({hash(s) for s in kept.values()}) == len(FINISHED)


async def test_no_summary_is_kept_for_a_journal_with_coarse_times(
    root: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem that keeps whole seconds (FAT, some network mounts) a rewrite within
    the second leaves size and times as they were: nothing is kept from such a journal."""

    seen_as = _listing._identities

    def whole_seconds(*args: Any) -> dict[str, _summary_file.Identity]:
        second = 1_000_000_000
        return {
            run_id: _summary_file.Identity(
                i.size, i.mtime_ns // second * second, i.ino, i.ctime_ns // second * second
            )
            for run_id, i in seen_as(*args).items()
        }

    monkeypatch.setattr(_listing, "_identities", whole_seconds)
    _, reads = await _list(root)
    assert reads == len(FINISHED) + 1
    assert _summary_file.load(str(root)) == {}
    _, reads = await _list(root)
    assert reads == len(FINISHED) + 1  # read again: nothing was kept
