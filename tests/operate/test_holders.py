"""A look at a store gives each run's version and holder as they are now, reusing the last
look's ``Version`` only where both are unchanged."""

from __future__ import annotations

import os
import pathlib

from tether.journal import FileStore, Manifest, RunStarted
from tether.operate._holders import look


async def _store(root: pathlib.Path, runs: list[str]) -> FileStore:
    async with FileStore(root) as store:
        for run_id in runs:
            started = RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])
            await (await store.create(run_id, [started])).aclose()
    return FileStore(root)


async def test_a_look_reuses_only_what_did_not_change(tmp_path: pathlib.Path) -> None:
    store = await _store(tmp_path, ["a", "b", "c"])
    first = (await look(store)).versions
    again = (await look(store, first)).versions
    assert again == first
    assert all(again[r] is first[r] for r in first)  # nothing made anew

    path = tmp_path / "runs" / "b.journal"
    with open(path, "ab") as f:
        f.write(b"\x00")  # b's version changes
    (tmp_path / "runs" / "c.journal").unlink()
    async with FileStore(tmp_path) as writer:
        held = await writer.open("a")  # a is held by this process now
        async with held:
            now = (await look(store, again)).versions
    assert set(now) == {"a", "b"}
    assert now["a"].held_by == os.getpid()
    assert now["a"].version == first["a"].version
    assert now["b"].version == (path.stat().st_size, path.stat().st_mtime_ns)
    assert now["b"].held_by is None
    assert now["a"] is not first["a"]
    assert now["b"] is not first["b"]


async def test_a_look_gives_each_journals_inode_and_ctime_from_its_one_stat(
    tmp_path: pathlib.Path,
) -> None:
    """What says a journal is the very file a kept summary was made from comes with its
    version: a listing makes no second ``stat`` per journal."""
    store = await _store(tmp_path, ["a", "b"])
    seen = await look(store)
    for run_id in ("a", "b"):
        st = (tmp_path / "runs" / f"{run_id}.journal").stat()
        assert seen.inodes[run_id] == (st.st_ino, st.st_ctime_ns)
        assert seen.versions[run_id].version == (st.st_size, st.st_mtime_ns)
