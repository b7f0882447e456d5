"""A disk that fills up under 200 runs, then frees: every run finishes, nothing is lost.

A full disk is not the runs' doing: each run whose write fails waits, trying again with
backoff, and the log says why (No space left on device). Once space is back, every run goes on
from what its journal holds; each delivery happens once per key.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import anyio
import pytest

import tether
from tether.journal import verify_file
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor

from .._disk import fill_disk, small_filesystem
from ._ledger_app import script

use = tether.ScriptedModel.tool_use

RUNS = 200


def big_delivery_app(
    ledger: Counter[str], go: anyio.Event
) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    """A model that waits for ``go``; a lookup whose result (20 KB) outgrows a journal's
    preallocated space, so that the full disk is felt by appends; a delivery counted by key."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(item: str) -> str:
        """Look an item up."""
        return f"{item}: " + "details " * 2500

    @tools.tool(policy="idempotency_key")
    async def deliver(item: str, ctx: tether.ToolContext) -> dict[str, bool]:
        """Deliver an item."""
        ledger[ctx.idempotency_key] += 1
        return {"ok": True}

    async def answer(messages: list[Message]) -> Any:
        await go.wait()
        return script(messages)

    return tether.ScriptedModel(answer), tools


@pytest.mark.slow
async def test_two_hundred_runs_outlive_a_full_disk(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tether.supervisor")
    ledger: Counter[str] = Counter()
    go = anyio.Event()
    model, tools = big_delivery_app(ledger, go)
    ids = [f"run-{n:03d}" for n in range(RUNS)]
    with small_filesystem(24) as mount:
        root = mount / "store"
        async with Supervisor(
            tether.FileStore(root), model=model, tools=tools, restart_backoff=0.01
        ) as sup:
            for run_id in ids:
                await sup.start(run_id, f"item {run_id}")
            filler = fill_disk(mount)  # all 200 are in flight, asking the model
            go.set()
            with anyio.fail_after(60):
                while not any("No space left on device" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # the runs keep hitting the full disk for a while
            filler.unlink()
            with anyio.fail_after(180):
                statuses = [await sup.wait(run_id, timeout=180) for run_id in ids]
        assert Counter(statuses) == {RunStatus.DONE: RUNS}
        assert set(ledger) == {f"{run_id}:toolu_2" for run_id in ids}  # one key per run
        for run_id in ids:
            result = verify_file(str(root / "runs" / f"{run_id}.journal"))
            assert result.damage is None
    failed = [r.getMessage() for r in caplog.records if "the store failed" in r.getMessage()]
    assert len({m.split(":")[0] for m in failed}) >= RUNS // 2  # most met it, and waited
    assert all("No space left on device" in m for m in failed)
