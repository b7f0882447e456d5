"""Runs removed from the store under a supervisor: routine when ``tether gc`` removed them.

``tether gc`` removes finished runs while workers sweep the store. A run listed by a sweep
and gone by the time it is read was finished, and nothing is lost: no error, no warning, and
no ``needs_attention`` on the board. A run this process knew to be unfinished and that
vanishes is worth a warning (``report_gone``).
"""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import anyio
import pytest

import tether
from tether.journal import FileStore, RunStat
from tether.journal._format import encode_header
from tether.journal._writer import frame_events, journal_path
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._entry import Entry
from tether.supervisor._restart import report_gone

from ..cli._stores import finished_run
from ._helpers import WAIT, delivery_app

RUNS = 3000
"""Finished runs in the store: the supervisor's first sweep reads them all while gc removes
them, so some are listed and then gone before they are read."""


def _write_finished_runs(runs_dir: pathlib.Path, count: int) -> list[str]:
    """Journals of runs that finished a day ago, written directly (unsynced: a fixture)."""
    runs_dir.mkdir(parents=True)
    ids = [f"old-{i:05d}" for i in range(count)]
    for run_id in ids:
        path = journal_path(str(runs_dir), run_id)
        _stamped, group = frame_events(finished_run(run_id, "done", 1.0), 0, path)
        with open(path, "wb") as f:
            f.write(encode_header(run_id) + group)
    return ids


def _journals(runs_dir: pathlib.Path) -> int:
    return sum(1 for name in os.listdir(runs_dir) if name.endswith(".journal"))


@pytest.mark.slow
def test_runs_gc_removes_while_a_supervisor_sweeps_are_routine(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, tools = delivery_app(Counter())
    for attempt in range(1, 6):  # until gc removed a run between the sweep's listing and read
        root = tmp_path / f"store-{attempt}"
        ids = _write_finished_runs(root / "runs", RUNS)
        caplog.clear()
        gc = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "gc", "--root", str(root), "--keep-days", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            while _journals(root / "runs") == RUNS and gc.poll() is None:
                time.sleep(0.002)  # until gc has started removing: the sweep below races it
            with caplog.at_level(logging.DEBUG, logger="tether"):
                found = anyio.run(_serve_briefly, root, model, tools, ids)
        finally:
            out, err = gc.communicate(timeout=120)
        assert gc.returncode == 0, err
        assert f"removed {RUNS} run(s)" in out.decode()
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert loud == [], [r.getMessage() for r in loud]
        gone = [r for r in caplog.records if "is gone from the store" in r.getMessage()]
        assert found["needs_attention"] == 0  # no removed run is shown as a problem
        if gone:
            print(f"attempt {attempt}: {len(gone)} runs gone between listing and reading")
            return
    pytest.fail("gc never removed a run between a sweep's listing and its read")


async def _serve_briefly(
    root: pathlib.Path, model: tether.ScriptedModel, tools: tether.ToolRegistry, ids: list[str]
) -> Counter[str]:
    """Enter a supervisor (its first sweep reads every run listed) and sweep a while; count
    the statuses it shows for the runs."""
    async with Supervisor(FileStore(root), model=model, tools=tools, sweep_interval=0.01) as sup:
        await anyio.sleep(0.2)
        found: Counter[str] = Counter()
        for run_id in ids:
            try:
                found[(await sup.inspect(run_id)).status.value] += 1
            except tether.RunNotFoundError:
                found["removed"] += 1
        return found


class RemovedAfterListing:
    """A ``FileStore`` whose ``run_stats`` removes the journal of ``victim`` right after
    listing it, with answers said to wait for it: as if someone deleted the file by hand then."""

    def __init__(self, store: FileStore, victim: str) -> None:
        self._store = store
        self.victim = victim
        self.armed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def __aenter__(self) -> RemovedAfterListing:
        await self._store.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._store.__aexit__(*exc_info)

    async def run_stats(self) -> dict[str, RunStat]:
        listed = await self._store.run_stats()
        if self.armed and self.victim in listed:
            self.armed = False
            os.unlink(self._store.location(self.victim))
            listed[self.victim] = RunStat(listed[self.victim].version, inbox=True)
        return listed


async def test_an_unfinished_run_removed_under_the_supervisor_is_a_warning(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(approval=True)
    async def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    model = tether.ScriptedModel(
        [[tether.ScriptedModel.tool_use("toolu_1", "refund", {"order": "A-1"})], "done"]
    )
    store = RemovedAfterListing(FileStore(tmp_path), "run-1")
    async with Supervisor(store, model=model, tools=tools, sweep_interval=0.01) as sup:  # type: ignore[arg-type]
        await sup.start("run-1", "refund A-1")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        with caplog.at_level(logging.INFO, logger="tether"):
            store.armed = True
            with anyio.fail_after(WAIT):
                while not any("disappeared" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.01)
    (record,) = [r for r in caplog.records if "disappeared" in r.getMessage()]
    assert record.levelno == logging.WARNING
    # (the sweep set it running to take the answers said to wait for it)
    assert record.getMessage() == (
        "run run-1 disappeared from the store while running here (removed by hand?)"
    )


def _entry(status: RunStatus, *, remote: bool = False) -> Entry:
    entry = Entry(status=status)
    entry.remote = remote
    return entry


@pytest.mark.parametrize(
    ("known", "level"),
    [
        (lambda: None, logging.DEBUG),  # listed, never read: what gc removes is finished
        (lambda: _entry(RunStatus.DONE), logging.DEBUG),
        (lambda: _entry(RunStatus.CANCELLED), logging.DEBUG),
        (lambda: _entry(RunStatus.RUNNING, remote=True), logging.INFO),  # another had it
        (lambda: _entry(RunStatus.RUNNING), logging.WARNING),
        (lambda: _entry(RunStatus.NEEDS_ATTENTION), logging.WARNING),
    ],
)
def test_how_loud_a_removed_run_is(
    known: Callable[[], Entry | None], level: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="tether"):
        report_gone("run-1", known())
    (record,) = caplog.records
    assert record.levelno == level
