"""``tether gc``: old finished runs go, unfinished and held ones stay, orphan blobs go."""

from __future__ import annotations

import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import anyio
import msgspec
import pytest

from tether.journal import Decision, FileStore

from ._stores import APPROVE, DONE, ESCALATED, FAILED, Env, cli, cli_async, finished_run


def _digest(content: str) -> str:
    return hashlib.sha256(msgspec.msgpack.encode(content)).hexdigest()


def _blobs(root: pathlib.Path) -> set[str]:
    return {p.name for p in (root / "blobs").glob("??/*")}


def _runs(root: pathlib.Path) -> set[str]:
    return {p.name.removesuffix(".journal") for p in (root / "runs").glob("*.journal")}


async def _age(env: Env) -> str:
    """Add old runs and an orphan blob; return the orphan's digest."""
    await env.craft("old-done", finished_run("old-done", "done", 10, big="a" * 300))
    await env.craft("old-cancelled", finished_run("old-cancelled", "cancelled", 8))
    await env.craft("old-failed", finished_run("old-failed", "failed", 10))
    await env.craft("ancient-failed", finished_run("ancient-failed", "failed", 40, big="b" * 300))
    await env.craft("old-held", finished_run("old-held", "done", 20))
    async with env.store() as store:
        return store.blobs.put_sync(b"orphan")


OLD = {"old-done", "old-cancelled", "ancient-failed", "old-held"}


def test_gc_dry_run_then_for_real(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    orphan = anyio.run(_age, env)
    (env.root / "runs" / "old-done.journal.torn-300").write_bytes(b"junk")
    live_blob = _digest("x" * 300)  # the done run's lookup result
    gone_blobs = {_digest("a" * 300), _digest("b" * 300), orphan}
    before_runs, before_blobs = _runs(env.root), _blobs(env.root)
    assert gone_blobs | {live_blob} == before_blobs

    code, out, err = cli(capsys, "gc", "--root", env.r, "--dry-run")
    assert (code, err) == (0, "")
    assert {
        line.split()[3] for line in out.splitlines() if line.startswith("would remove run")
    } == OLD
    assert "would remove run old-done (done 10d00h ago) and old-done.journal.torn-300" in out
    would_blobs = {line.split()[3] for line in out.splitlines() if "would remove blob" in line}
    assert would_blobs == gone_blobs
    assert "dry run: would remove 4 run(s) and 3 blob(s)" in out
    assert (
        "kept 2 unfinished, 3 finished within their window, 0 old but held by a process, "
        "0 unreadable" in out
    )
    assert (_runs(env.root), _blobs(env.root)) == (before_runs, before_blobs)

    code, out, err = cli(capsys, "gc", "--root", env.r)
    assert (code, err) == (0, "")
    assert "removed run old-done (done 10d00h ago) and old-done.journal.torn-300" in out
    assert "removed 4 run(s) and 3 blob(s)" in out
    assert _runs(env.root) == {APPROVE, ESCALATED, DONE, FAILED, "old-failed"}
    assert _blobs(env.root) == {live_blob}
    assert not (env.root / "runs" / "old-done.journal.torn-300").exists()

    code, out, _ = cli(capsys, "gc", "--root", env.r)
    assert code == 0
    assert "removed 0 run(s) and 0 blob(s)" in out

    # Tighter windows: recent finished runs go too, unfinished ones never.
    code, out, _ = cli(capsys, "gc", "--root", env.r, "--keep-days", "0", "--keep-failed-days", "0")
    assert code == 0
    assert _runs(env.root) == {APPROVE, ESCALATED}
    assert _blobs(env.root) == set()
    code, out, _ = cli(capsys, "runs", "--root", env.r)
    assert APPROVE in out
    assert ESCALATED in out


async def test_gc_leaves_a_held_journal_and_its_blobs(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    orphan = await _age(env)
    async with FileStore(env.root) as store:
        journal = await store.open("old-held")
        async with journal:
            code, out, _ = await cli_async(capsys, "gc", "--root", env.r, "--dry-run")
            assert code == 0
            assert "kept run old-held: its journal is held by another process" in out
            code, out, _ = await cli_async(capsys, "gc", "--root", env.r)
            assert code == 0
            assert "kept run old-held: its journal is held by another process" in out
            assert "removed 3 run(s) and 0 blob(s)" in out
            assert "blobs not collected" in out
            assert "old-held" in out
            assert "old-held" in _runs(env.root)
            assert orphan in _blobs(env.root)
    code, out, _ = await cli_async(capsys, "gc", "--root", env.r)
    assert code == 0
    assert "removed run old-held (done 20d00h ago)" in out
    assert "removed 1 run(s) and 3 blob(s)" in out
    assert orphan not in _blobs(env.root)


def test_gc_with_an_unreadable_journal(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    orphan = anyio.run(_age, env)
    path = env.root / "runs" / f"{FAILED}.journal"
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF
    path.write_bytes(bytes(data))
    code, out, _ = cli(capsys, "gc", "--root", env.r)
    assert code == 1
    assert f"kept run {FAILED}: journal cannot be read" in out
    assert f"blobs not collected: cannot read the journal of {FAILED}" in out
    assert FAILED in _runs(env.root)
    assert orphan in _blobs(env.root)
    assert not OLD & _runs(env.root)


def test_gc_usage_errors(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--keep-days", "-1"], ["--keep-failed-days", "soon"]):
        with pytest.raises(SystemExit) as exc:
            cli(capsys, "gc", "--root", env.r, *bad)
        assert exc.value.code == 2


async def test_gc_removes_exactly_the_files_of_the_run_it_collects(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """``a.journal.torn-1`` is a valid run id: its inbox and its copies are not run ``a``'s."""
    lookalike = "a.journal.torn-1"
    await env.craft("a", finished_run("a", "done", 10))
    await env.craft(lookalike, finished_run(lookalike, "done", 1))  # within its window
    runs = env.root / "runs"
    async with env.store() as store:
        for run_id in ("a", lookalike):
            await store.post(run_id, Decision(call_id="c1", approved=True, by="priya"))
    mine = ["a.journal.torn-300", "a.journal.torn-300.1", "a.journal.broken", "a.inbox.torn-256"]
    theirs = [f"{lookalike}.journal.torn-300", f"{lookalike}.journal.broken"]
    for name in mine + theirs:
        (runs / name).write_bytes(b"kept aside")

    code, out, err = await cli_async(capsys, "gc", "--root", env.r)
    assert (code, err) == (0, "")
    assert f"removed run a (done 10d00h ago) and {', '.join(sorted([*mine, 'a.inbox']))}" in out
    left = set(os.listdir(runs))
    assert not {"a.journal", "a.inbox", *mine} & left
    assert {f"{lookalike}.journal", f"{lookalike}.inbox", *theirs} <= left
    async with env.store() as store:
        assert [e.by for e in await store.take_inbox(lookalike) if isinstance(e, Decision)] == [
            "priya"
        ]


def test_gc_removes_unfinished_blob_writes_once_stale(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a blob write killed half-way leaves: its temporary file. Removed once an hour old,
    never while it may be a write under way."""
    folder = env.root / "blobs" / "ab"
    folder.mkdir(exist_ok=True)
    stale = folder / f"{'ab' + '0' * 62}.4242.139.tmp"
    fresh = folder / f"{'ab' + '1' * 62}.4343.140.tmp"
    stale.write_bytes(b"s" * 1000)
    fresh.write_bytes(b"f" * 10)
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))

    code, out, _ = cli(capsys, "gc", "--root", env.r, "--dry-run")
    assert code == 0
    assert (
        f"would remove unfinished blob write blobs/ab/{stale.name} (1000 bytes, 2h00m old)" in out
    )
    assert fresh.name not in out
    assert "and 1 unfinished blob write(s)" in out
    assert stale.exists()

    code, out, _ = cli(capsys, "gc", "--root", env.r)
    assert code == 0
    assert f"removed unfinished blob write blobs/ab/{stale.name}" in out
    assert not stale.exists()
    assert fresh.read_bytes() == b"f" * 10


def test_a_stray_file_named_like_a_journal_is_left_alone_and_blocks_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs/bad name.journal` is no run's (its name is not a run id): gc says so and goes on."""
    from tether.cli import main

    assert main(["demo", "--root", str(tmp_path / "s"), "--json"]) == 0
    capsys.readouterr()
    (tmp_path / "s" / "runs" / "bad name.journal").write_text("not a journal")
    code = main(["gc", "--root", str(tmp_path / "s"), "--dry-run", "--keep-days", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "would remove run run-kite-142" in out
    assert "left alone: runs/bad name.journal (use letters, digits" in out


def test_blobs_an_interrupted_gc_set_aside_are_put_back(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gc killed (SIGKILL) between setting blobs aside (``<digest>.gc``) and checking their
    references again leaves them there. A read that needs one (a writer that referred to it
    meanwhile) puts it back; the next gc puts back the rest and decides again."""
    orphan = anyio.run(_age, env)
    live = _digest("x" * 300)  # the done run's lookup result: never set aside
    collected = {_digest("a" * 300), _digest("b" * 300)}  # blobs of the runs this gc removes
    killed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "gc", "--root", env.r],
        env={**os.environ, "TETHER_CRASH_AT": "gc_set_aside"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _blobs(env.root) == {live} | {f"{d}.gc" for d in {orphan, *collected}}

    async def read() -> bytes:
        async with env.store() as store:
            return await store.blobs.get(orphan)

    assert anyio.run(read) == b"orphan"
    assert orphan in _blobs(env.root)
    code, out, err = cli(capsys, "gc", "--root", env.r)
    assert (code, err) == (0, "")
    for digest in collected:
        assert f"put back blob {digest}, set aside by an interrupted gc" in out
    assert f"removed blob {orphan}" in out  # still unreferenced: this gc decides again
    assert _blobs(env.root) == {live}


def test_gc_refuses_a_directory_that_holds_no_store(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped ``--root`` (the store's parent, say): gc neither creates the store's
    folders there nor removes what looks like a blob or a leftover, and says why."""
    parent = tmp_path / "srv"
    lookalike = parent / "blobs" / "ab" / ("ab" + "0" * 62)
    lookalike.parent.mkdir(parents=True)
    lookalike.write_text("not tether's")
    old = time.time() - 7 * 86400
    os.utime(lookalike, (old, old))
    before = sorted(p.relative_to(parent) for p in parent.rglob("*"))
    for dry in ((), ("--dry-run",)):
        code, out, err = cli(capsys, "gc", "--root", str(parent), *dry)
        assert code == 3, (dry, out, err)
        assert out == ""
        assert f"{parent}: no tether store here (it has no runs/ directory)" in err
    assert sorted(p.relative_to(parent) for p in parent.rglob("*")) == before
