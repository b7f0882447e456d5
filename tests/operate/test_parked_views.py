"""A run the runtime parks says so in its journal, so every view shows it the same way.

A run whose pinned contract a deploy changed used to be ``needs_attention`` inside the worker
only: ``tether runs``, ``tether show``, the console and ``/api/inbox`` all said ``running ...
continues when a supervisor picks it up``, nothing was journaled and the worker logged it at
INFO. Here a real ``tether worker`` of the changed application meets such a run; every view
then says ``needs_attention`` with the same reason and what to do, and a worker of the
application as it was (a rolled-back deploy) sends the run on by itself.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import httpx2
import pytest

import tether.web
from tether.journal import FileStore, Parked
from tether.supervisor import Supervisor

from .._cli import run_tether
from ..web._envs import PRIYA, TOKENS, auth
from . import _contract_app

REPO = pathlib.Path(__file__).resolve().parents[2]
RUN = "run-deployed"


def _worker(root: pathlib.Path, app: str, log: pathlib.Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", "--root", str(root), "--quiet",
             "--app", f"tests.operate._contract_app:{app}"],
            cwd=REPO, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip


def _stop(worker: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, log.read_text()


async def _created(root: pathlib.Path) -> None:
    """The run as v1 started it, approved and about to call ``lookup``: the point where the
    run needs its contract."""
    store = FileStore(root)
    v1 = _contract_app.v1()
    async with Supervisor(store, model=v1.model, tools=v1.tools, resume=False) as sup:
        await sup.start(RUN, "how long do refunds take?")
        await sup.wait(RUN, timeout=10)
    async with FileStore(root) as store:
        await tether.operate.decide(store, RUN, "toolu_1", approved=True, by="priya")


def _events(root: pathlib.Path) -> list[Any]:
    async def read() -> list[Any]:
        async with FileStore(root) as store:
            return await store.read(RUN)

    return anyio.run(read)


async def _console_views(root: pathlib.Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    async with FileStore(root) as store:
        app = tether.web.app(store, tokens=TOKENS)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://console.test") as c:
            page = (await c.get(f"/runs/{RUN}", headers=auth(PRIYA))).text
            api = (await c.get(f"/api/runs/{RUN}", headers=auth(PRIYA))).json()
            inbox = (await c.get("/api/inbox", headers=auth(PRIYA))).json()
    return page, api, inbox


@pytest.mark.slow
def test_a_run_parked_for_its_contract_says_so_in_every_view(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    anyio.run(_created, root)
    log = tmp_path / "worker.log"
    worker = _worker(root, "v2", log)
    try:
        deadline = time.monotonic() + 30
        while not any(isinstance(e, Parked) for e in _events(root)):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(0.5)  # a few more sweeps: nothing more is written
    finally:
        _stop(worker, log)
    (parked,) = [e for e in _events(root) if isinstance(e, Parked)]
    assert parked.cause == "contract"
    assert "tool 'lookup' version '1' changed its contract" in parked.reason
    assert f"run {RUN} parked: tool 'lookup'" in log.read_text()  # shown despite --quiet

    where = ("--root", str(root))
    runs = run_tether("runs", *where).stdout
    (line,) = [ln for ln in runs.splitlines() if ln.startswith(RUN)]
    assert "needs_attention" in line
    assert "continues when a supervisor picks it up" not in runs
    (listed,) = json.loads(run_tether("runs", *where, "--json").stdout)
    shown = run_tether("show", *where, RUN).stdout
    shown_json = json.loads(run_tether("show", *where, RUN, "--json").stdout)["summary"]
    page, api, inbox = anyio.run(_console_views, root)
    action = listed["action"]
    assert "roll back" in action
    for view in (listed, shown_json, api["summary"]):
        assert (view["status"], view["reason"], view["action"]) == (
            "needs_attention",
            parked.reason,
            action,
        )
    assert shown.startswith(f"run {RUN}: needs_attention")
    assert "`tether repin RUN --app MODULE:FACTORY --by NAME`" in action
    # tether show fills the command in, as its approve and signal hints are.
    filled = action.replace("tether repin RUN", f"tether repin --root {root} {RUN}")
    assert f"to go on: {filled}" in shown
    assert "needs_attention" in page
    assert "roll back" in page
    (entry,) = inbox["parked"]
    assert (entry["run_id"], entry["reason"]) == (RUN, parked.reason)

    # The deploy is rolled back: a worker that has the contract sends the run on by itself.
    worker = _worker(root, "v1", log)
    try:
        deadline = time.monotonic() + 30
        while json.loads(run_tether("runs", *where, "--json").stdout)[0]["status"] != "done":
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        _stop(worker, log)
