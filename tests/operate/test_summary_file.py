"""Finished runs' summaries kept on disk: used only for a journal exactly as it was, and a file
that can be wrong (torn, flipped, another tether's) is ignored whole."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import anyio
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
from tether.operate import _summary_file
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
