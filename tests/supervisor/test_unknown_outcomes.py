"""A tool that raises ``OutcomeUnknownError`` (its connection broke mid-call) leaves the outcome
unknown: the call goes through its replay policy, as if its process had died, while retries
are left. It is never an error result on its own, and never run again under ``escalate``."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import tether
from tether.journal import Escalated, ToolFailed, ToolStarted
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
RUN = "run-1"
CALL = "toolu_01"


def lost_once(attempts: list[int], **options: Any) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(**options)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise tether.OutcomeUnknownError("act", "the connection was lost mid-call")
        return f"acted on {item} (attempt {ctx.attempt})"

    return tools


async def run_to_rest(root: pathlib.Path, tools: tether.ToolRegistry) -> Any:
    model = tether.ScriptedModel([[use(CALL, "act", {"item": "a"})], "all done"])
    async with Supervisor(
        tether.FileStore(root), model=model, tools=tools, clock=VirtualClock(autojump_threshold=0)
    ) as sup:
        await sup.start(RUN, "go")
        await sup.wait(RUN, timeout=WAIT)
        return await sup.inspect(RUN)


@pytest.mark.parametrize("policy", ["rerun", "idempotency_key"])
async def test_a_call_safe_to_repeat_runs_again_after_an_unknown_outcome(
    tmp_path: pathlib.Path, policy: str
) -> None:
    attempts: list[int] = []
    view = await run_to_rest(tmp_path, lost_once(attempts, policy=policy, retries=1))

    assert view.status is RunStatus.DONE
    assert attempts == [1, 2]
    events = await read_events(tmp_path, RUN)
    failed = of_type(events, ToolFailed)
    assert [(f.attempt, f.timed_out, f.error) for f in failed] == [
        (1, True, "the connection was lost mid-call")
    ]
    assert result_of(events, CALL).content == "acted on a (attempt 2)"


async def test_an_escalate_call_escalates_and_never_runs_again(tmp_path: pathlib.Path) -> None:
    attempts: list[int] = []
    view = await run_to_rest(tmp_path, lost_once(attempts, policy="escalate", retries=1))

    assert view.status is RunStatus.NEEDS_ATTENTION
    assert attempts == [1]
    events = await read_events(tmp_path, RUN)
    (escalated,) = of_type(events, Escalated)
    assert escalated.reason == (
        "act attempt 1 ended without a result (the connection was lost mid-call); outcome "
        "unknown; resolve it as succeeded, retry or failed"
    )


async def test_a_verify_call_is_verified_and_not_run_again_when_it_landed(
    tmp_path: pathlib.Path,
) -> None:
    attempts: list[int] = []
    checked: list[int] = []

    async def landed(item: str, ctx: tether.ToolContext) -> str | None:
        checked.append(ctx.attempt)
        return f"{item} was acted on"

    tools = lost_once(attempts, policy="verify", verify=landed, retries=1)
    view = await run_to_rest(tmp_path, tools)

    assert view.status is RunStatus.DONE
    assert (attempts, checked) == ([1], [1])
    assert result_of(await read_events(tmp_path, RUN), CALL).content == "a was acted on"


async def test_without_retries_a_rerun_call_gets_an_error_result(tmp_path: pathlib.Path) -> None:
    attempts: list[int] = []
    view = await run_to_rest(tmp_path, lost_once(attempts, policy="rerun"))

    assert view.status is RunStatus.DONE
    assert attempts == [1]
    events = await read_events(tmp_path, RUN)
    result = result_of(events, CALL)
    assert not result.ok
    assert result.content == "the connection was lost mid-call (after 1 attempts)"
    assert [s.attempt for s in of_type(events, ToolStarted)] == [1]
