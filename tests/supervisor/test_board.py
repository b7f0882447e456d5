"""A finished run costs the supervisor nothing once nobody waits on it: counted, not timed.

The board (``_entry.Board``) keeps an entry per run only while something uses it (a task, a
lock, a parked status to remember); the timers keep no wake-up of a finished run; and a sweep
reads a finished run once, then skips it while its journal stays as it is.
``bench/soak.py`` measures the memory over tens of thousands of runs.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import anyio
import pytest

import tether
from tether import RunStateError
from tether.journal import AnyEvent
from tether.models import ContentBlock, Message
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT

RUNS = 60


class ReadCounter:
    """A ``FileStore`` that counts the journals read through it (``read``)."""

    def __init__(self, inner: tether.FileStore) -> None:
        self._inner = inner
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read(self, run_id: str) -> list[AnyEvent]:
        self.reads += 1
        return await self._inner.read(run_id)

    async def __aenter__(self) -> ReadCounter:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._inner.__aexit__(*exc_info)


def looking_app() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    """Each run calls ``look`` once (approval needed for item ``"ask"``), then answers."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def look(item: str) -> str:
        """Look an item up."""
        return f"found {item}"

    @tools.tool(policy="rerun", approval=True, approval_timeout=3600)
    async def ask(item: str) -> str:
        """Look an item up, once a person agrees."""
        return f"asked for {item}"

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        if len(messages) == 1:
            prompt = str(messages[0]["content"])
            return [tether.ScriptedModel.tool_use("toolu_1", prompt, {"item": "x"})]
        return "done looking"

    return tether.ScriptedModel(script), tools


def board_of(sup: Supervisor) -> dict[str, Any]:
    return sup._board.runs


async def test_the_board_keeps_no_entry_for_finished_runs(tmp_path: pathlib.Path) -> None:
    model, tools = looking_app()
    store = ReadCounter(tether.FileStore(tmp_path))
    sup = Supervisor(store, model=model, tools=tools, sweep_interval=None)
    changes: list[tuple[str, RunStatus]] = []
    async with sup, anyio.create_task_group() as tg:

        async def watch() -> None:
            async for change in sup.events():
                changes.append((change.run_id, change.status))

        tg.start_soon(watch)
        await anyio.sleep(0)
        # One run waits for a person, with a deadline an hour away: it keeps its entry.
        await sup.start("parked", "ask")
        assert await sup.wait("parked", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        # Someone waits on these before they finish: each gets its status.
        async with anyio.create_task_group() as runs:
            for i in range(RUNS):

                async def one(run_id: str) -> None:
                    await sup.start(run_id, "look")
                    assert await sup.wait(run_id, timeout=WAIT) is RunStatus.DONE

                runs.start_soon(one, f"run-{i:03d}")
        assert list(board_of(sup)) == ["parked"]
        assert len(sup._timers) == 1  # the parked run's approval deadline
        # A run that waited for approval, approved and finished keeps no deadline either.
        await sup.decide("parked", "toolu_1", approved=True, by="ops")
        assert await sup.wait("parked", timeout=WAIT) is RunStatus.DONE
        assert board_of(sup) == {}
        assert len(sup._timers) == 0
        # Asked again later, a run let go is read from its journal.
        reads = store.reads
        assert await sup.wait("run-007", timeout=0) is RunStatus.DONE
        assert (await sup.inspect("run-007")).final_text == "done looking"
        assert store.reads == reads + 2
        assert board_of(sup) == {}
        # A refused answer to a finished run leaves no entry behind either.
        with pytest.raises(RunStateError):
            await sup.decide("run-007", "toolu_1", approved=True, by="ops")
        with pytest.raises(RunStateError):
            await sup.cancel("run-007")
        assert board_of(sup) == {}

        # A sweep reads each run finished here once (to learn it is finished), keeps no entry
        # for it, and the next sweep reads none of them again.
        reads = store.reads
        counts = await sup._sweeper.sweep()
        assert counts["done"] == RUNS + 1
        assert store.reads == reads + RUNS + 1
        assert board_of(sup) == {}
        reads = store.reads
        await sup._sweeper.sweep()
        assert store.reads == reads
        tg.cancel_scope.cancel()
    # Every run was reported finished once: a sweep reading it again is no news.
    done = [run_id for run_id, status in changes if status is RunStatus.DONE]
    assert sorted(done) == sorted(["parked", *(f"run-{i:03d}" for i in range(RUNS))])


async def test_a_finished_run_written_again_is_read_again(tmp_path: pathlib.Path) -> None:
    """A run that failed, let go and skipped by the sweeps, then re-opened from another process
    (``tether retry``): its journal changed, so the next sweep reads it again and drives it."""
    model, tools = looking_app()
    store = ReadCounter(tether.FileStore(tmp_path))
    sup = Supervisor(store, model=model, tools=tools, sweep_interval=None)
    async with sup:
        await sup.start("r", "look", budgets=tether.Budgets(max_model_calls=1))
        assert await sup.wait("r", timeout=WAIT) is RunStatus.FAILED  # no second model call
        await sup._sweeper.sweep()
        reads = store.reads
        await sup._sweeper.sweep()
        assert store.reads == reads
        retry = [sys.executable, "-m", "tether.cli", "retry", "r", "--root", str(tmp_path)]
        done = await anyio.run_process(
            [*retry, "--by", "ops", "--extend", "max_model_calls=2"], check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        await sup._sweeper.sweep()
        assert store.reads == reads + 1
        assert await sup.wait("r", timeout=WAIT) is RunStatus.DONE
        assert board_of(sup) == {}
