"""A call's ``tool_started`` written with the model's answer, where running it again is harmless.

Calls of ``rerun`` and ``idempotency_key`` tools that run at once are recorded as started in the
same group (one write, one sync) as the answer that asked for them. Everything else keeps its own
``tool_started`` group, written just before the tool runs. These tests read the group boundaries
from the file, and kill a real process right after the answer's group is durable.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest

import tether
from tether.journal._format import HEADER_SIZE
from tether.journal._reader import read_group
from tether.models import ContentBlock
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT

use = tether.ScriptedModel.tool_use
REPO = pathlib.Path(__file__).resolve().parents[2]


def groups_of(path: pathlib.Path) -> list[list[str]]:
    """The event kinds of each group of a journal, in order (up to its preallocated zeros)."""
    data = path.read_bytes()
    pos, groups = HEADER_SIZE, []
    seq = 0
    while pos < len(data) and data[pos:].count(0) != len(data) - pos:
        events, pos = read_group(data, pos, seq)
        seq += len(events)
        groups.append([type(e).__name__ for e in events])
    return groups


def tools_with(policy: str, *, approval: bool = False) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy=tether.ReplayPolicy(policy), approval=approval)
    async def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    @tools.tool(policy="rerun")
    async def lookup(order: str) -> str:
        """Look an order up."""
        return "found"

    return tools


async def run_to_rest(root: pathlib.Path, turn: list[ContentBlock], tools: Any) -> RunStatus:
    model = tether.ScriptedModel([turn, "done"])
    async with Supervisor(tether.FileStore(root), model=model, tools=tools) as sup:
        await sup.start("run-1", "refund A-7")
        return await sup.wait("run-1", timeout=WAIT)


@pytest.mark.parametrize("policy", ["rerun", "idempotency_key"])
async def test_safe_call_starts_in_the_answers_group(tmp_path: pathlib.Path, policy: str) -> None:
    turn: list[ContentBlock] = [use("toolu_1", "refund", {"order": "A-7"})]
    assert await run_to_rest(tmp_path, turn, tools_with(policy)) is RunStatus.DONE
    assert groups_of(tmp_path / "runs" / "run-1.journal") == [
        ["RunStarted"],
        ["ModelResponse", "ToolStarted"],
        ["ToolResult"],
        ["ModelResponse", "RunFinished"],
    ]


@pytest.mark.parametrize(
    ("policy", "approval", "turn"),
    [
        ("escalate", False, [use("toolu_1", "refund", {"order": "A-7"})]),
        ("rerun", False, [use("toolu_1", "refund", {"order": 7})]),  # invalid arguments
        ("rerun", False, [use("toolu_1", "missing", {"order": "A-7"})]),  # unknown tool
        (  # one call of the turn is not safe to repeat: none starts early
            "escalate",
            False,
            [
                use("toolu_1", "lookup", {"order": "A-7"}),
                use("toolu_2", "refund", {"order": "A-7"}),
            ],
        ),
    ],
)
async def test_other_calls_keep_their_own_start(
    tmp_path: pathlib.Path, policy: str, approval: bool, turn: list[ContentBlock]
) -> None:
    assert await run_to_rest(tmp_path, turn, tools_with(policy, approval=approval)) is (
        RunStatus.DONE
    )
    groups = groups_of(tmp_path / "runs" / "run-1.journal")
    assert groups[1] == ["ModelResponse"]


async def test_a_call_needing_approval_keeps_its_own_start(tmp_path: pathlib.Path) -> None:
    turn: list[ContentBlock] = [use("toolu_1", "refund", {"order": "A-7"})]
    status = await run_to_rest(tmp_path, turn, tools_with("rerun", approval=True))
    assert status is RunStatus.WAITING_FOR_APPROVAL
    async with tether.FileStore(tmp_path) as store:
        kinds = [type(e).__name__ for e in await store.read("run-1")]
    assert kinds == ["RunStarted", "ModelResponse"]


async def test_tool_budget_is_checked_before_an_early_start(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel([[use("toolu_1", "refund", {"order": "A-7"})], "done"])
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools_with("rerun")
    ) as sup:
        await sup.start("run-1", "refund A-7", budgets=tether.Budgets(max_tool_calls=0))
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.FAILED
    async with tether.FileStore(tmp_path) as store:
        kinds = [type(e).__name__ for e in await store.read("run-1")]
    assert "ToolStarted" not in kinds


def child(root: pathlib.Path, ledger: pathlib.Path, policy: str, crash_at: str | None) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    argv = [sys.executable, "-m", "tests.supervisor._prestart_child", str(root), str(ledger)]
    return subprocess.run(
        [*argv, policy], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("policy", "attempts"),
    [("rerun", ["2"]), ("idempotency_key", ["2"]), ("escalate", ["1"])],
)
def test_sigkill_after_the_answer_is_saved(
    tmp_path: pathlib.Path, policy: str, attempts: list[str]
) -> None:
    """Killed right after the answer's group is durable, before any tool ran.

    Where the start went out with the answer, the resumed run finds the call started without a
    result and runs it under its policy (attempt 2, and nobody is asked); elsewhere the call was
    never started and runs as attempt 1. Either way the tool's body runs exactly once.
    """
    root, ledger = tmp_path / "store", tmp_path / "ledger.txt"
    killed = child(root, ledger, policy, "model_saved")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not ledger.exists(), "no tool ran before the kill"
    early = policy in ("rerun", "idempotency_key")
    groups = groups_of(root / "runs" / "run-1.journal")
    assert groups[-1] == (["ModelResponse", "ToolStarted"] if early else ["ModelResponse"])

    resumed = child(root, ledger, policy, None)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "done"
    assert ledger.read_text().splitlines() == attempts
