"""Everything a ``FileStore`` creates is its owner's alone: files 0600, directories 0700.

Journals, blobs and inboxes hold customer data. Under the usual umask (022) files used to be
created 0644 and directories 0755, readable by every user of the machine. The modes are now set
explicitly, whatever the umask, on every kind of file the store makes: journals, blobs, inbox
files (and the temporary file an inbox is rewritten through), torn-tail copies, the ``.broken``
copies of a repair and of a damaged inbox, and every directory it creates on the way to them.
"""

from __future__ import annotations

import os
import pathlib
import random
import stat
from collections.abc import Iterator

import pytest

from tether.journal import Decision, FileStore, Manifest, RunStarted, ToolResult, repair_file
from tether.journal._format import HEADER_SIZE

from ._journals import build_sample, install, sample_events


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    old = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(old)


def modes(top: pathlib.Path) -> dict[str, int]:
    """The permission bits of ``top`` and of everything under it, by path relative to ``top``."""
    found = {".": stat.S_IMODE(top.stat().st_mode)}
    for path in top.rglob("*"):
        found[str(path.relative_to(top))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])


async def test_every_file_and_directory_a_store_creates_is_owner_only(
    tmp_path: pathlib.Path, umask: int
) -> None:
    top = tmp_path / "made"  # everything from here down is made by the store
    root = top / "deep" / "store"
    async with FileStore(root, blob_threshold=100) as store:
        journal = await store.create("r", [started("r")])
        await journal.append([ToolResult(call_id="c1", ok=True, content="b" * 500)])  # a blob
        await journal.aclose()
        for name in ("ann", "bob", "cy"):
            await store.post("r", Decision(call_id="c1", approved=True, by=name))
        await store.clear_inbox("r", 1)  # rewritten through a temporary file
        inbox = root / "runs" / "r.inbox"
        whole = inbox.read_bytes()
        inbox.write_bytes(whole + b"\x01" * 40)  # a post cut short
        await store.post("r", Decision(call_id="c1", approved=True, by="dee"))  # .torn copy
        damaged = bytearray(inbox.read_bytes())
        damaged[HEADER_SIZE + 20] ^= 0xFF
        inbox.write_bytes(bytes(damaged))  # (rewriting a file keeps its mode)
        await store.clear_inbox("r", 1)  # a damaged inbox is kept whole in .broken

        path = root / "runs" / "r.journal"
        with open(path, "ab") as f:
            f.write(b"\x07" * 100)  # a torn tail: opening cuts it off and keeps a copy
        await (await store.open("r")).aclose()

    sample = build_sample("s", sample_events(random.Random(1), (1, 2, 1), run_id="s"))
    bad = bytearray(sample.data)
    bad[sample.starts[1] + 20] ^= 0xFF  # corruption in the middle, for a repair
    broken = install(root, "s", bytes(bad))
    os.chmod(broken, 0o600)  # the test wrote this one: only the copy repair makes is checked
    report = repair_file(str(broken), apply=True)
    assert report.moved_to is not None

    found = modes(top)
    names = set(found)
    assert {"deep/store/runs/r.journal", "deep/store/runs/r.inbox"} <= names
    assert any(n.startswith("deep/store/blobs/") and len(n.split("/")) == 5 for n in names)
    assert any(".inbox.torn-" in n for n in names)
    assert any(n.endswith("r.inbox.broken") for n in names)
    assert any(".journal.torn-" in n for n in names)
    assert any(n.endswith("s.journal.broken") for n in names)
    loose = {
        name: oct(mode)
        for name, mode in found.items()
        if mode != (0o700 if (top / name).is_dir() else 0o600)
    }
    assert loose == {}, f"not owner-only under umask {umask:03o}"
