"""J6 and J13: a writer killed with SIGKILL at random moments loses no acknowledged event.

A child process (``_journal_proc.py``) appends to one journal in a loop and prints every
acknowledgement; the parent kills it at a random moment, checks the journal on disk, and starts
the next child on the same journal, whose open recovers whatever tail the kill left. After every
kill, every acknowledged event must be on disk, in its place, and seqs must run from 0 without a
gap; nothing seen on disk before may change.

SIGKILL loses no page cache, so what this exercises is the process dying mid-``pwrite``,
mid-batch, mid-open and mid-truncation, and the flock being released by the kernel: not power
loss (the fsync tests with injected faults cover what the disk may drop).
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from typing import IO

import anyio
import pytest

from tether import JournalLockedError
from tether.journal import (
    AnyEvent,
    Event,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolResult,
    verify_file,
)

from ..journal._journals import encode_group, stamp
from ._journal_proc import open_when_free

PROC = pathlib.Path(__file__).with_name("_journal_proc.py")
RUN = "run-kill"
ROUNDS = 60
BUDGET_S = 50.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _spawn(
    mode: str, root: pathlib.Path, seed: int = 0, *, io_uring: bool = True
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(PROC), mode, str(root), RUN, str(seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TETHER_IO_URING": "1" if io_uring else "0"},
    )


def _ring_available(tmp_path: pathlib.Path) -> bool:
    async def probe() -> bool:
        async with FileStore(tmp_path / "probe") as store:
            return store.uses_io_uring

    return anyio.run(probe)


@pytest.fixture(params=["io_uring", "threads"])
def io_uring(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> bool:
    """Each way appends reach the disk: through io_uring (where the kernel allows it) and
    through the writer threads. The children inherit the choice through the environment."""
    if request.param == "io_uring" and not _ring_available(tmp_path):
        pytest.skip("io_uring is not available here")
    return bool(request.param == "io_uring")


def _line(proc: subprocess.Popen[bytes]) -> str:
    out: IO[bytes] | None = proc.stdout
    assert out is not None
    line = out.readline().decode()
    if not line:
        proc.wait()
        err = proc.stderr.read().decode() if proc.stderr else ""
        pytest.fail(f"child exited with {proc.returncode} before reporting:\n{err}")
    return line.strip()


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _create(root: pathlib.Path) -> list[AnyEvent]:
    async def create() -> list[AnyEvent]:
        async with FileStore(root, redact=None) as store:
            started = RunStarted(run_id=RUN, manifest=Manifest(model="m"), messages=[])
            journal = await store.create(RUN, [started])
            events = list(journal.events)
            await journal.aclose()
            return events

    return anyio.run(create)


def _next_group(rng: random.Random, round_: int) -> list[Event]:
    return [
        ToolResult(call_id=f"planted-{round_}-{i}", ok=True, content="x" * rng.randint(0, 3000))
        for i in range(rng.randint(1, 4))
    ]


def _call_id(event: AnyEvent) -> str:
    if isinstance(event, ModelResponse):
        return str(event.message["call_id"])
    call_id = getattr(event, "call_id", None)
    assert isinstance(call_id, str), event
    return call_id


def test_sigkill_at_random_moments_loses_no_acknowledged_event(
    tmp_path: pathlib.Path, io_uring: bool
) -> None:
    root = tmp_path / "store"
    known = _create(root)  # every event seen on disk so far, in order
    path = root / "runs" / f"{RUN}.journal"
    rng = random.Random(20240611)
    acks: dict[int, tuple[int, str]] = {}  # first seq of an append -> (last seq, token)
    kills = 0
    moments = {"early": 0, "delay": 0, "acks": 0}
    torn_seen = 0  # checks that found a torn tail (left by a kill, or planted and not yet cut)
    planted_tails = 0
    started = time.monotonic()
    ahead = _spawn("append", root, seed=0, io_uring=io_uring)  # the next child, already starting
    try:
        for round_ in range(ROUNDS):
            proc, ahead = ahead, _spawn("append", root, seed=round_ + 1, io_uring=io_uring)
            assert proc.stdin is not None
            lines: list[str] = []
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            moment = rng.choices(("early", "delay", "acks"), weights=(1, 4, 4))[0]
            moments[moment] += 1
            if moment == "early":  # during open and its recovery of the last tail
                time.sleep(rng.uniform(0, 0.004))
            elif moment == "delay":
                lines.append(_line(proc))
                time.sleep(rng.uniform(0.005, 0.080))
            else:
                lines.append(_line(proc))
                for _ in range(rng.randint(1, 40)):
                    lines.append(_line(proc))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stdout is not None
            assert proc.stderr is not None
            rest = proc.stdout.read().decode()
            err = proc.stderr.read().decode()
            _close(proc)
            assert proc.returncode == -signal.SIGKILL, err
            kills += 1
            lines += rest.splitlines()

            for line in lines:
                word, *args = line.split()
                if word == "open":
                    # The child found exactly what the last check found, torn tail dropped.
                    assert int(args[0]) == len(known)
                else:
                    assert word == "ack", line
                    acks[int(args[0])] = (int(args[1]), args[2])

            result = verify_file(str(path))  # raises if the kill left anything but a torn tail
            events = result.events
            torn_seen += result.damage is not None
            assert [e.seq for e in events] == list(range(len(events)))
            assert events[: len(known)] == known, "an event seen on disk before has changed"
            for first, (last, token) in acks.items():
                assert last < len(events), f"acknowledged seq {last} lost ({len(events)} on disk)"
                for i, seq in enumerate(range(first, last + 1)):
                    assert _call_id(events[seq]) == f"{token}:{i}"
            known = events
            if rng.random() < 0.25:
                # What a kill in the middle of a pwrite leaves (the kernel can stop a write
                # between pages): the first part of the next group. The next child's open
                # must drop it and carry on after the last whole group.
                group = encode_group(stamp(_next_group(rng, round_), len(known)))
                with open(path, "r+b") as f:
                    f.seek(result.end)
                    f.write(group[: rng.randrange(1, len(group))])
                planted_tails += 1
            if time.monotonic() - started > BUDGET_S and kills >= 50:
                break
    finally:
        ahead.kill()
        ahead.wait()
        _close(ahead)

    assert kills >= 50
    assert len(acks) > kills  # the children did get appends in
    assert moments["acks"] > 0
    assert moments["delay"] > 0

    async def reopen() -> None:
        async with FileStore(root, redact=None) as store:
            journal = await open_when_free(store, RUN)  # the last child was killed just now
            assert journal.events == known
            await journal.append([ToolResult(call_id="last", ok=True)])
            await journal.aclose()
            assert len(await store.read(RUN)) == len(known) + 1

    anyio.run(reopen)
    print(
        f"kills={kills} acks={len(acks)} events={len(known)} size={path.stat().st_size} "
        f"torn tails seen={torn_seen} planted={planted_tails} {moments}"
    )


def test_sigkill_while_creating_runs_leaves_each_run_whole_or_absent(
    tmp_path: pathlib.Path,
) -> None:
    """A run appears with its first events or not at all, whenever its creator is killed.

    Children create runs in a loop (header and first group in one write and one sync, then a
    link, then close with its unsynced trim) and are killed at random moments. Every run the
    store lists must open and hold exactly its two first events, every acknowledged run must be
    listed, and a killed creation leaves no half-made run behind (nor, where the filesystem
    has ``O_TMPFILE``, any file at all).
    """
    root = tmp_path / "store"
    rng = random.Random(20261130)
    acked: set[str] = set()
    kills = 0
    ahead = _spawn("create", root, seed=0)
    try:
        for round_ in range(25):
            proc, ahead = ahead, _spawn("create", root, seed=round_ + 1)
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            lines = [_line(proc)]
            time.sleep(rng.uniform(0, 0.05))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stdout is not None
            lines += proc.stdout.read().decode().splitlines()
            _close(proc)
            assert proc.returncode == -signal.SIGKILL
            kills += 1
            for line in lines:
                word, run_id = line.split()
                assert word == "created", line
                acked.add(run_id)
    finally:
        ahead.kill()
        ahead.wait()
        _close(ahead)

    if getattr(os, "O_TMPFILE", 0):  # a killed creation's unnamed file dies with its process
        names = os.listdir(root / "runs")
        assert [n for n in names if not n.endswith(".journal")] == []

    async def check() -> set[str]:
        async with FileStore(root, redact=None) as store:
            listed = set(await store.list_runs())
            for run_id in listed:
                async with await store.open(run_id) as journal:
                    started, result = journal.events  # exactly the two first events
                    assert isinstance(started, RunStarted)
                    assert started.run_id == run_id
                    assert isinstance(result, ToolResult)
                    assert result.call_id == run_id
            return listed

    listed = anyio.run(check)
    assert acked <= listed, f"acknowledged runs missing: {sorted(acked - listed)[:5]}"
    assert len(acked) > kills  # the children did create runs
    print(f"kills={kills} acknowledged={len(acked)} listed={len(listed)}")


def test_a_second_process_is_locked_out_until_the_first_is_killed(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    known = _create(root)
    holder = _spawn("hold", root)
    try:
        assert _line(holder) == f"open {len(known)}"
        second = subprocess.run(
            [sys.executable, str(PROC), "try", str(root), RUN],
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert second.stdout.decode().split() == ["locked"]

        async def in_this_process() -> None:
            async with FileStore(root, redact=None) as store:
                with pytest.raises(JournalLockedError) as info:
                    await store.open(RUN)
                assert info.value.path == store.location(RUN)
                assert await store.read(RUN) == known  # reading takes no lock

        anyio.run(in_this_process)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert holder.returncode == -signal.SIGKILL
    finally:
        if holder.returncode is None:
            holder.kill()
            holder.wait()
        _close(holder)

    second = subprocess.run(
        [sys.executable, str(PROC), "try", str(root), RUN],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert second.stdout.decode().split() == ["open", str(len(known))]

    async def after() -> None:
        async with FileStore(root, redact=None) as store:
            journal = await store.open(RUN)
            assert journal.events == known
            await journal.aclose()

    anyio.run(after)
    assert os.path.exists(root / "runs" / f"{RUN}.journal")
