"""Worker processes sharing one database (RELIABILITY rows P3 and P5, and a SIGKILL).

Each worker is a real process (``tests.postgres._pg_worker``) with its own PostgresStore. The
ledger app's outside world is a file that deduplicates by idempotency key; a trace file logs
every tool call as it starts, with the caller's pid and time, outside the system under test.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections import Counter

import anyio
import pytest

from tether.journal import Resumed, RunStarted, ToolStarted
from tether.postgres import PostgresStore
from tether.supervisor import fold
from tether.supervisor._loop import Runtime, build_manifest

from ..supervisor import _ledger_app

REPO = pathlib.Path(__file__).resolve().parents[2]
RUNS = 24


class World:
    def __init__(self, tmp: pathlib.Path, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.ledger = tmp / "ledger.jsonl"
        self.trace = tmp / "trace.log"
        self.log = tmp / "workers.log"
        self.ids = [f"run-{i:03d}" for i in range(RUNS)]

    async def create_runs(self) -> None:
        async with PostgresStore(self.dsn, schema=self.schema) as store:
            rt = Runtime(
                model=_ledger_app.make_model(), tools=_ledger_app.tools, load_blob=store.load_blob
            )
            manifest = build_manifest(rt, system=None, app_version="")
            for run_id in self.ids:
                messages = [{"role": "user", "content": f"item-{run_id}"}]
                started = RunStarted(run_id=run_id, manifest=manifest, messages=messages)
                await (await store.create(run_id, [started])).aclose()

    def worker(self, *extra: str, slow: float = 0.0) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "TETHER_TEST_LEDGER": str(self.ledger),
            "TETHER_TEST_TRACE": str(self.trace),
            "TETHER_TEST_SLOW": str(slow),
        }
        cmd = [sys.executable, "-m", "tests.postgres._pg_worker", self.dsn, self.schema, *extra]
        with self.log.open("ab") as stderr:
            return subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
            )

    def calls(self) -> list[tuple[int, float, str, str]]:
        """Every tool call started: (pid, wall time, tool, key)."""
        if not self.trace.exists():
            return []
        out = []
        for line in self.trace.read_text().splitlines():
            pid, at, tool, key = line.split(" ", 3)
            out.append((int(pid), float(at), tool, key))
        return out

    def delivered(self) -> list[str]:
        if not self.ledger.exists():
            return []
        return [json.loads(line)["key"] for line in self.ledger.read_text().splitlines()]

    async def statuses(self) -> dict[str, str]:
        async with PostgresStore(self.dsn, schema=self.schema) as store:
            out = {}
            for run_id in self.ids:
                state = fold(await store.read(run_id))
                out[run_id] = state.finished.status if state.finished else "unfinished"
            return out

    async def wait_all_done(self, timeout: float = 90) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            statuses = await self.statuses()
            if all(s == "done" for s in statuses.values()) or time.monotonic() > deadline:
                return statuses
            await anyio.sleep(0.2)

    async def resumed_pids(self) -> Counter[int]:
        pids: Counter[int] = Counter()
        async with PostgresStore(self.dsn, schema=self.schema) as store:
            for run_id in self.ids:
                pids.update(e.pid for e in await store.read(run_id) if isinstance(e, Resumed))
        return pids

    def check_exactly_once(self) -> None:
        assert sorted(self.delivered()) == sorted(f"{r}:toolu_2" for r in self.ids)


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


@pytest.mark.slow
async def test_a_killed_workers_runs_are_finished_by_the_other(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str
) -> None:
    world = World(tmp_path, pg_dsn, pg_schema)
    await world.create_runs()
    first = world.worker("--lease-ttl", "1")
    second = world.worker("--lease-ttl", "1")
    try:
        await _until(lambda: len(world.delivered()) >= 3, 60, "first deliveries")
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        statuses = await world.wait_all_done()
        assert statuses == dict.fromkeys(world.ids, "done"), world.log.read_text()[-3000:]
    finally:
        _stop(first, second)
    assert second.returncode == 0, world.log.read_text()[-3000:]
    world.check_exactly_once()
    assert (await world.resumed_pids())[second.pid] > 0, "the survivor took runs over"


@pytest.mark.slow
async def test_a_worker_paused_past_its_lease_is_fenced_when_it_wakes(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str
) -> None:
    """P3: SIGSTOP a worker holding runs past its lease; another takes them over and finishes
    them; SIGCONT: the paused worker dispatches no new tool call and writes nothing (a call
    it had already dispatched when the stop landed may still run, as after any crash)."""
    world = World(tmp_path, pg_dsn, pg_schema)
    await world.create_runs()
    paused = world.worker("--lease-ttl", "1", "--max-active", "8", slow=0.3)
    try:
        await _until(
            lambda: sum(1 for c in world.calls() if c[0] == paused.pid) >= 4, 60, "work in hand"
        )
        paused.send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        other = world.worker("--lease-ttl", "1")
        try:
            statuses = await world.wait_all_done()
            assert statuses == dict.fromkeys(world.ids, "done"), world.log.read_text()[-3000:]
            woke_at = time.time()
            paused.send_signal(signal.SIGCONT)
            await anyio.sleep(3.0)  # time to act, if it were going to
        finally:
            _stop(other)
    finally:
        _stop(paused)
    # (a margin: SIGSTOP takes effect a moment after kill() returns)
    late = [c for c in world.calls() if c[0] == paused.pid and c[1] > stopped_at + 0.2]
    # The stop can land between a call's fence check and the tool's first line: that call was
    # already dispatched (its tool_started durable, which the new owner found dangling and ran
    # again under the tool's policy). Any other call after the pause would be a new dispatch
    # the fence failed to stop.
    async with PostgresStore(pg_dsn, schema=pg_schema) as store:
        for _pid, _at, tool, key in late:
            run_id = key.removeprefix("item-").partition(":")[0]
            starts = [
                e for e in await store.read(run_id) if isinstance(e, ToolStarted) and e.name == tool
            ]
            assert len(starts) >= 2, f"a new tool call after the pause: {tool} {key}"
    assert len({c[3] for c in late}) == len(late) <= 8, f"tool calls after the pause: {late}"
    assert woke_at > stopped_at
    world.check_exactly_once()
    fenced = [
        line
        for line in world.log.read_text().splitlines()
        if line.startswith(f"{paused.pid} WARNING") and "lease lost" in line
    ]
    assert fenced, "the paused worker learnt that it lost its leases"
    async with PostgresStore(pg_dsn, schema=pg_schema) as store:
        for run_id in world.ids:  # nothing the paused worker tried to write got in
            events = await store.read(run_id)
            assert [e.seq for e in events] == list(range(len(events)))


@pytest.mark.slow
@pytest.mark.parametrize("offset", [3600.0, -3600.0])
async def test_a_worker_with_a_wrong_clock_takes_nothing_over_early(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str, offset: float
) -> None:
    """P5: a worker whose clock is an hour off sweeps every 0.1 s while another holds every
    run (leases of 2 s, runs of over 4 s: renewals keep them). No run changes hands."""
    world = World(tmp_path, pg_dsn, pg_schema)
    await world.create_runs()
    holder = world.worker("--lease-ttl", "2", "--max-active", str(RUNS), slow=4.0)
    skewed = None
    try:
        await _until(
            lambda: len({c[3] for c in world.calls() if c[2] == "lookup"}) == RUNS,
            60,
            "the holder to hold every run",
        )
        skewed = world.worker("--lease-ttl", "1", "--clock-offset", str(offset))
        statuses = await world.wait_all_done()
        assert statuses == dict.fromkeys(world.ids, "done"), world.log.read_text()[-3000:]
    finally:
        _stop(holder, *([skewed] if skewed else []))
    assert skewed is not None
    assert not [c for c in world.calls() if c[0] == skewed.pid], "early takeover"
    assert (await world.resumed_pids())[skewed.pid] == 0
    world.check_exactly_once()
