"""One odd entry in ``runs/`` stops nothing: ``tether runs`` lists every real run and names the
odd ones, nothing hangs on a FIFO, and a worker beside them finishes its runs and stops on
SIGTERM.

Every command runs as a real process under a timeout: a FIFO named like a journal used to block
an open for ever, and a blocked test must fail rather than hang the suite.
"""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import anyio
import pytest

from tether.journal import FileStore, RunStarted
from tether.supervisor import fold
from tether.supervisor._loop import Runtime, build_manifest

from ..supervisor import _ledger_app
from ._stores import APPROVE, DONE, ESCALATED, FAILED, Env

REPO = pathlib.Path(__file__).resolve().parents[2]
REAL = {APPROVE, ESCALATED, DONE, FAILED}
ODD = {"fifo": "a FIFO", "dir": "a directory", "link": "a symbolic link"}


def make_odd_entries(runs: pathlib.Path) -> None:
    os.mkfifo(runs / "fifo.journal")
    (runs / "dir.journal").mkdir()
    (runs / "link.journal").symlink_to(runs / f"{DONE}.journal")


def tether(*argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """``tether ARGV`` in a process of its own (as ``user``, if given; see ``_as_user``)."""
    command = ["tests.cli._as_user", user] if user else ["tether.cli"]
    return subprocess.run(
        [sys.executable, "-m", *command, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,  # a FIFO opened for reading would block for ever
        check=False,
    )


def reasons(root: pathlib.Path, user: str | None = None) -> dict[str, str]:
    """``tether runs --json``: each run's status and reason."""
    done = tether("runs", "--root", str(root), "--json", user=user)
    assert done.returncode == 0, done.stderr
    return {r["run_id"]: f"{r['status']}: {r['reason']}" for r in json.loads(done.stdout)}


def test_runs_lists_every_real_run_and_names_the_odd_entries(env: Env) -> None:
    make_odd_entries(env.root / "runs")
    done = tether("runs", "--root", env.r)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == REAL | set(ODD)
    assert "waiting_for_approval" in rows[APPROVE]
    assert "done" in rows[DONE]
    assert "is a FIFO, not a regular file: skipped" in done.stderr  # the warning, once
    found = reasons(env.root)
    assert set(found) == REAL | set(ODD)
    for run_id, kind in ODD.items():
        path = env.root / "runs" / f"{run_id}.journal"
        assert "needs_attention" in rows[run_id]
        assert found[run_id] == (
            f"needs_attention: journal cannot be read: {path} is {kind}, not a regular file"
        )
    actions = {
        r["run_id"]: r["action"]
        for r in json.loads(tether("runs", "--root", env.r, "--json").stdout)
    }
    for run_id in ODD:
        assert actions[run_id].startswith("not a journal of this store: move it out of runs/")


def test_a_journal_copied_under_another_runs_name_is_named_so(env: Env) -> None:
    """``tether journal verify`` sees what the store sees (it said "ok" while every listing
    called the file corrupt), and the advice is to rename it, not to repair it."""
    runs = env.root / "runs"
    shutil.copy(runs / f"{DONE}.journal", runs / "copied.journal")
    verified = tether("journal", "verify", str(runs / "copied.journal"))
    assert verified.returncode == 1, verified.stdout
    assert f"header names run '{DONE}', expected 'copied'" in verified.stderr
    outside = env.root.parent / "copied.journal"  # a copy to look at, anywhere else: fine
    shutil.copy(runs / f"{DONE}.journal", outside)
    assert tether("journal", "verify", str(outside)).returncode == 0
    listed = tether("runs", "--root", env.r)
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("copied ")]
    assert "needs_attention" in row
    shown = json.loads(tether("runs", "--root", env.r, "--json").stdout)
    (summary,) = [r for r in shown if r["run_id"] == "copied"]
    assert summary["action"].startswith("the file holds another run's journal (copied or")


def test_show_and_gc_beside_a_fifo_answer_at_once(env: Env) -> None:
    make_odd_entries(env.root / "runs")
    shown = tether("show", "--root", env.r, "fifo")
    assert shown.returncode == 3
    assert "fifo.journal: cannot read: [Errno 22] is a FIFO, not a regular file" in shown.stderr
    collected = tether("gc", "--root", env.r, "--dry-run")
    assert collected.returncode == 0, collected.stderr
    assert "kept 2 unfinished" in collected.stdout
    assert (env.root / "runs" / "fifo.journal").exists()


def test_a_journal_its_reader_may_not_open_is_named_and_hides_no_run() -> None:
    """As another user than root (whom no mode stops): a journal of mode 000 gives EACCES."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to run as")
    if os.geteuid() != 0:
        pytest.skip("needs root, to hand the store to another user")
    top = pathlib.Path(tempfile.mkdtemp(prefix="tether-eacces-"))  # outside root's 0700 tmp
    try:
        env = Env(top / "store")
        anyio.run(env.build)
        for path in [top, *top.rglob("*")]:
            os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
        locked = env.root / "runs" / f"{FAILED}.journal"
        locked.chmod(0o000)
        found = reasons(env.root, user="nobody")
        assert set(found) == REAL
        assert found[DONE].startswith("done")
        assert found[FAILED] == (
            f"needs_attention: journal cannot be read: {locked}: cannot read: "
            "[Errno 13] Permission denied"
        )
        shown = tether("show", "--root", env.r, FAILED, user="nobody")
        assert shown.returncode == 3
        assert "Permission denied" in shown.stderr
    finally:
        shutil.rmtree(top)


async def _one_run(root: pathlib.Path) -> None:
    async with FileStore(root) as store:
        rt = Runtime(
            model=_ledger_app.make_model(), tools=_ledger_app.tools, load_blob=store.load_blob
        )
        started = RunStarted(
            run_id="run-1",
            manifest=build_manifest(rt, system=None, app_version=""),
            messages=[{"role": "user", "content": "item-1"}],
        )
        await (await store.create("run-1", [started])).aclose()


async def _finished(root: pathlib.Path) -> bool:
    async with FileStore(root) as store:
        return fold(await store.read("run-1")).finished is not None


def test_a_worker_beside_odd_entries_finishes_its_run_and_stops_on_sigterm(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "store"
    anyio.run(_one_run, root)
    make_odd_entries(root / "runs")
    app = "tests.supervisor._ledger_app:app"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "worker",
            "--root",
            str(root),
            "--quiet",
            "--app",
            app,
        ],
        cwd=REPO,
        env={**os.environ, "TETHER_TEST_LEDGER": str(tmp_path / "ledger.jsonl")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not anyio.run(_finished, root):
            assert time.monotonic() < deadline, "the worker did not finish the run"
            assert worker.poll() is None, "the worker died"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)  # a worker stuck on a FIFO ignored SIGTERM
        assert worker.returncode == 0, err
        assert "fifo.journal is a FIFO, not a regular file: skipped" in err
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
