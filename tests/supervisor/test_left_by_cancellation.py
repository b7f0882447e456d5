"""A supervisor left by a cancellation (a ``move_on_after`` around it, mid-run) lets go of
everything it held: no descriptor stays open, and no advertisement says it is alive."""

from __future__ import annotations

import os
import pathlib

import anyio
import pytest

import tether
from tether.journal import FileStore
from tether.supervisor import Supervisor

pytestmark = pytest.mark.timeout(60)
use = tether.ScriptedModel.tool_use


def _open_files() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


async def test_a_supervisor_cancelled_mid_run_leaves_no_descriptor_or_advertisement(
    tmp_path: pathlib.Path,
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def slow() -> str:
        """Work a long while."""
        await anyio.sleep(3600)
        return "never"

    store = FileStore(tmp_path)
    before = _open_files()
    for i in range(3):
        model = tether.ScriptedModel([[use("toolu_1", "slow", {})], "done"])
        with anyio.move_on_after(0.3):
            async with Supervisor(store, model=model, tools=tools) as sup:
                await sup.start(f"run-{i}", "work")
                await anyio.sleep(3600)
    left = {path for path in _open_files() - before if str(tmp_path) in path}
    assert left == set()
    assert list((tmp_path / "workers").glob("*")) == []
    async with FileStore(tmp_path) as again:
        assert await again.advertised() == {}


async def test_a_drain_does_not_wait_for_a_run_whose_journal_is_still_opening(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of such a run is in flight: the drain gives its opening up at once instead of
    waiting out ``drain_timeout`` (a worker told to stop during a database outage took 30 s)."""
    model = tether.ScriptedModel(["done"])
    async with Supervisor(FileStore(tmp_path), model=model, resume=False) as creator:
        await creator.start("run-1", "hi", drive=False)
    store = FileStore(tmp_path)

    async def slow_to_open(run_id: str) -> tether.FileJournal:
        """As a PostgreSQL claim retrying a database out of reach, for its
        ``reconnect_timeout``."""
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    monkeypatch.setattr(store, "open", slow_to_open)
    sup = Supervisor(store, model=model, drain_timeout=30)
    with anyio.fail_after(10):
        async with sup:
            while not sup._rt.opening:
                await anyio.sleep(0.01)
            started = anyio.current_time()
    assert anyio.current_time() - started < 5
