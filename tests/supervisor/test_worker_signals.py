"""SIGTERM and SIGINT at every moment of a worker's start-up: a clean exit 0 each time.

A storm of real ``tether worker`` processes, one after another on one store of unfinished
runs, each signalled at a moment of its start-up: from 0 ms after it was started, at steps
through its first second and a half, and at moments read from its log (its first line, its
"serving" line, its first tool call in flight). A worker signalled once its first line has run
exits 0 and leaves the store as a clean stop does: no lock held, nothing counted against any
run. Before that line the interpreter is still importing tether, and the signal's default
action ends it (-15), before it has touched anything; the test checks that too.

At the end a last worker finishes every run: each delivery was made once, and no run was
charged an interruption by any of the stops.
"""

from __future__ import annotations

import json
import pathlib
import signal

import anyio
import pytest

from tether.cli import main
from tether.journal import FileStore, Resumed, Suspended
from tether.supervisor import fold

from ._worker_proc import MOMENTS, Storm, lines, stop, until
from .test_workers import _create_runs

OFFSETS = [0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
           0.9, 1.0, 1.2, 1.5]  # fmt: skip
"""Seconds after the worker was started."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_signal_at_any_moment_of_start_up_is_a_clean_exit(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    storm = Storm(tmp_path, ["--root", str(root)])
    ids = anyio.run(_create_runs, root)
    moments: list[str | float] = [*MOMENTS, *OFFSETS]
    for when in moments:
        storm.signal(when)
    for when in (0.3, 0.8, "serving"):  # SIGINT (Ctrl-C) too
        storm.signal(when, signal.SIGINT)
    print(storm.check())
    assert {s.when for s in storm.stops if s.first_line} >= set(MOMENTS)

    # The store is usable: one more worker finishes every run, each delivery once.
    proc, log = storm.worker()
    until(lambda: any(": serving " in line for line in lines(log)), "serving", running=proc)
    until(lambda: len(_delivered(storm.ledger)) == len(ids), "every delivery", running=proc)
    until(lambda: all(_finished(root, ids).values()), "every run finished", running=proc)
    assert stop(proc) == 0, log.read_text()
    assert sorted(_delivered(storm.ledger)) == sorted(f"{r}:toolu_2" for r in ids)
    suspended = 0
    for run_id in ids:
        events = anyio.run(_read, root, run_id)
        charged = [e for e in events if isinstance(e, Resumed) and e.charged]
        assert charged == [], f"{run_id} was charged for a stop: {charged}"
        suspended += sum(isinstance(e, Suspended) for e in events)
    assert suspended > 0, "some stops caught runs in flight"
    print(f"runs suspended by a stop and resumed uncharged: {suspended}")


def _delivered(ledger: pathlib.Path) -> list[str]:
    return [json.loads(line)["key"] for line in lines(ledger)]


async def _read(root: pathlib.Path, run_id: str) -> list[object]:
    async with FileStore(root) as store:
        return list(await store.read(run_id))


def _finished(root: pathlib.Path, ids: list[str]) -> dict[str, bool]:
    async def read() -> dict[str, bool]:
        async with FileStore(root) as store:
            return {r: fold(await store.read(r)).finished is not None for r in ids}

    return anyio.run(read)


def test_the_worker_command_called_in_a_process_puts_its_handlers_back(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tether.cli.main`` may run in a process of the caller's (a test suite's): the worker
    command's handlers are its own for as long as it runs, and the caller's after. (A SIGTERM
    left ignored would be inherited by every process the caller starts later.)"""
    stops = (signal.SIGTERM, signal.SIGINT)
    before = {signum: signal.getsignal(signum) for signum in stops}
    with pytest.raises(SystemExit):  # a usage error, found after the handlers were installed
        main(["worker", "--root", str(tmp_path), "--lease-ttl", "5", "--app", "m:f"])
    assert main(["worker", "--root", str(tmp_path), "--app", "no_such_module_here:app"]) == 1
    assert {signum: signal.getsignal(signum) for signum in stops} == before
    assert "cannot load no_such_module_here:app" in capsys.readouterr().err
