"""Stores holding real runs in every resting status, for the operator command tests."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

import tether
from tether.cli import main
from tether.journal import (
    AnyEvent,
    Event,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolResult,
    ToolStarted,
)
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._loop import Runtime, build_manifest

use = tether.ScriptedModel.tool_use
WAIT = 10.0
BLOB_THRESHOLD = 100

APPROVE = "run-approve"
ESCALATED = "run-escalated"
DONE = "run-done"
FAILED = "run-failed"

REFUND_CALL = "toolu_r1"
CHARGE_CALL = "toolu_c1"

SCRIPTS: dict[str, list[Any]] = {
    "refund o-1": [[use(REFUND_CALL, "issue_refund", {"order": "o-1"})], "refund handled"],
    "charge c-1": [[use(CHARGE_CALL, "charge_card", {"card": "c-1"})], "charge handled"],
    "look big": [[use("toolu_l1", "lookup", {"q": "big"})], "all done"],
    "look loop": [[use("toolu_l2", "lookup", {"q": "small"})], "never reached"],
}


def _answer(messages: list[Message]) -> Any:
    prompt = str(messages[0]["content"])
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    return SCRIPTS[prompt][turn]


async def start_resting_runs(sup: Supervisor) -> None:
    """Start the parked, done and failed runs and wait until each has come to rest."""
    await sup.start(APPROVE, "refund o-1")
    await sup.start(DONE, "look big")
    await sup.start(FAILED, "look loop", budgets=tether.Budgets(max_model_calls=1))
    for run_id, want in (
        (APPROVE, RunStatus.WAITING_FOR_APPROVAL),
        (DONE, RunStatus.DONE),
        (FAILED, RunStatus.FAILED),
    ):
        assert await sup.wait(run_id, timeout=WAIT) is want, run_id


@dataclass
class Env:
    """A store with one run per resting status, and what its tools did."""

    root: pathlib.Path
    refunds: list[str] = field(default_factory=list)
    charges: list[str] = field(default_factory=list)

    @property
    def r(self) -> str:
        return str(self.root)

    def model(self) -> tether.ScriptedModel:
        return tether.ScriptedModel(_answer)

    def tools(self) -> tether.ToolRegistry:
        tools = tether.ToolRegistry()

        @tools.tool(policy="idempotency_key", approval=True)
        async def issue_refund(order: str) -> str:
            """Refund an order."""
            self.refunds.append(order)
            return f"refunded {order}"

        @tools.tool  # escalate: its outcome is unknown after a crash
        async def charge_card(card: str) -> str:
            """Charge a card."""
            self.charges.append(card)
            return f"charged {card}"

        @tools.tool(policy="rerun")
        async def lookup(q: str) -> str:
            """Look something up."""
            return "x" * 300 if q == "big" else "small"

        return tools

    def store(self) -> tether.FileStore:
        return tether.FileStore(self.root, blob_threshold=BLOB_THRESHOLD)

    async def build(self) -> None:
        model, tools = self.model(), self.tools()
        store = self.store()
        async with store:
            rt = Runtime(model=model, tools=tools, load_blob=store.load_blob)
            started = RunStarted(
                run_id=ESCALATED,
                manifest=build_manifest(rt, system=None, app_version=""),
                messages=[{"role": "user", "content": "charge c-1"}],
            )
            response = ModelResponse(
                message={"role": "assistant", "content": SCRIPTS["charge c-1"][0]}
            )
            journal = await store.create(ESCALATED, [started])
            async with journal:
                await journal.append([response])
                await journal.append([ToolStarted(call_id=CHARGE_CALL, name="charge_card")])
            async with Supervisor(store, model=model, tools=tools) as sup:
                await start_resting_runs(sup)
                assert await sup.wait(ESCALATED, timeout=WAIT) is RunStatus.NEEDS_ATTENTION

    async def resume(self, run_id: str) -> tether.RunView:
        """Enter a supervisor on the store; return the run once it rests."""
        async with Supervisor(self.store(), model=self.model(), tools=self.tools()) as sup:
            await sup.wait(run_id, timeout=WAIT)
            return await sup.inspect(run_id)

    async def events(self, run_id: str) -> list[AnyEvent]:
        return await self.store().read(run_id)

    async def craft(self, run_id: str, events: Sequence[Event]) -> None:
        """A run holding ``events`` as given (their ``at`` is kept)."""
        async with self.store() as store:
            journal = await store.create(run_id)
            async with journal:
                for event in events:
                    await journal.append([event])


def finished_run(run_id: str, status: str, days_ago: float, big: str | None = None) -> list[Event]:
    """Events of a run that finished ``days_ago`` days ago; ``big`` goes to a blob."""
    at = time.time() - days_ago * 86400
    events: list[Event] = [
        RunStarted(
            run_id=run_id,
            manifest=tether.journal.Manifest(model="scripted"),
            messages=[{"role": "user", "content": "old"}],
            at=at - 60,
        )
    ]
    if big is not None:
        events += [
            ModelResponse(
                message={"role": "assistant", "content": [use("c1", "lookup", {"q": "big"})]},
                at=at - 50,
            ),
            ToolStarted(call_id="c1", name="lookup", at=at - 40),
            ToolResult(call_id="c1", ok=True, content=big, at=at - 30),
        ]
    events += [
        ModelResponse(message={"role": "assistant", "content": "bye"}, at=at - 10),
        RunFinished(status=status, at=at),
    ]
    return events


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``tether ARGV`` in this process; return the exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


async def cli_async(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cli`` from inside an event loop (the command runs its own loop in a thread)."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(main, list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err
