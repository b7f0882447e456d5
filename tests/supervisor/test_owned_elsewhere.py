"""A run another process advances, as a second supervisor on the same directory sees it: said
once in its log (each sweep tries the run's lock again, quietly; taking the run up once the
other stops is ``test_workers``' subject)."""

from __future__ import annotations

import logging
import pathlib

import anyio
import pytest

import tether
from tether.journal import FileStore
from tether.supervisor import RunStatus, Supervisor

pytestmark = pytest.mark.timeout(60)
use = tether.ScriptedModel.tool_use


async def test_a_run_held_elsewhere_is_said_once_however_many_sweeps(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    inside, release = anyio.Event(), anyio.Event()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def look_up() -> str:
        """Look something up, slowly."""
        inside.set()
        await release.wait()
        return "found"

    def model() -> tether.ScriptedModel:
        return tether.ScriptedModel([[use("toolu_1", "look_up", {})], "done"])

    caplog.set_level(logging.INFO, "tether.supervisor")
    async with Supervisor(FileStore(tmp_path), model=model(), tools=tools) as holder:
        await holder.start("run-1", "look it up")
        with anyio.fail_after(10):
            await inside.wait()
        async with Supervisor(
            FileStore(tmp_path), model=model(), tools=tools, sweep_interval=0.02
        ) as other:
            sweeps = other._sweeper
            for _ in range(20):
                await sweeps.sweep()
                await anyio.sleep(0.01)
            said = [
                r.getMessage()
                for r in caplog.records
                if "run-1" in r.getMessage() and "another process" in r.getMessage()
            ]
            assert said == [
                "run run-1 is advanced by another process; taken up here if that one stops"
            ]
            release.set()
            assert await holder.wait("run-1", timeout=10) is RunStatus.DONE
