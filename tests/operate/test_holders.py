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
    first, _ = await look(store)
    again, _ = await look(store, first)
    assert again == first
    assert all(again[r] is first[r] for r in first)  # nothing made anew

    path = tmp_path / "runs" / "b.journal"
    with open(path, "ab") as f:
        f.write(b"\x00")  # b's version changes
    (tmp_path / "runs" / "c.journal").unlink()
    async with FileStore(tmp_path) as writer:
        held = await writer.open("a")  # a is held by this process now
        async with held:
            now, _ = await look(store, again)
    assert set(now) == {"a", "b"}
    assert now["a"].held_by == os.getpid()
    assert now["a"].version == first["a"].version
    assert now["b"].version == (path.stat().st_size, path.stat().st_mtime_ns)
    assert now["b"].held_by is None
    assert now["a"] is not first["a"]
    assert now["b"] is not first["b"]
