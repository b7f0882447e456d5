"""``tether worker`` sets its own process's garbage collector; an embedded ``Supervisor`` never
touches the application's."""

from __future__ import annotations

import gc
import pathlib
import signal
import subprocess
import sys
import time

import anyio

import tether
from tether.journal import FileStore, RunStarted, ToolResult
from tether.supervisor._loop import Runtime, build_manifest
from tether.supervisor._worker import WORKER_GC_THRESHOLD

from . import _gc_app

REPO = pathlib.Path(__file__).resolve().parents[2]
APP = "tests.supervisor._gc_app:app"


async def _create_run(root: pathlib.Path) -> None:
    async with FileStore(root) as store:
        rt = Runtime(model=_gc_app.make_model(), tools=_gc_app.tools, load_blob=store.load_blob)
        manifest = build_manifest(rt, system=None, app_version="")
        started = RunStarted(
            run_id="r", manifest=manifest, messages=[{"role": "user", "content": "x"}]
        )
        await (await store.create("r", [started])).aclose()


async def _result(root: pathlib.Path) -> ToolResult | None:
    async with FileStore(root) as store:
        found = [e for e in await store.read("r") if isinstance(e, ToolResult)]
    return found[0] if found else None


def test_a_worker_raises_the_first_generations_threshold_and_freezes_what_start_up_made(
    tmp_path: pathlib.Path,
) -> None:
    anyio.run(_create_run, tmp_path)
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", "--root", str(tmp_path), "--app", APP],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while (result := anyio.run(_result, tmp_path)) is None:
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the worker never ran the call"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert isinstance(result.content, dict)
    assert result.content["threshold"][0] == WORKER_GC_THRESHOLD
    assert result.content["frozen"] > 1000  # the modules and the application, out of its sight


async def test_an_embedded_supervisor_leaves_the_collector_as_it_found_it(
    tmp_path: pathlib.Path,
) -> None:
    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    async with tether.Supervisor(
        tether.FileStore(tmp_path), model=_gc_app.make_model(), tools=_gc_app.tools
    ) as sup:
        await sup.start("r", "go")
        assert await sup.wait("r") is tether.RunStatus.DONE
        assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
