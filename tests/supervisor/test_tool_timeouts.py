"""Tool timeouts and retries, declared with the tool, and failures that stay with their call.

A timed-out attempt has an unknown outcome, so it goes through the tool's replay policy like a
call whose process died (run again, verified, or escalated) while retries are left. An
exception in ``retry_on`` is a known failure: it runs again whatever the policy. Every attempt
is journaled (``tool_started``, ``tool_failed``) and counted in the tool budget.

Timeouts and backoff are the subject, so the supervisors run on a ``VirtualClock`` that jumps
whenever everything waits: a slow tool sleeps an hour on it against a minute's timeout, and
the journal's times are exact.
"""

from __future__ import annotations

import pathlib
from typing import Any

import anyio
import pytest

import tether
from tether.journal import Budgets, Escalated, ToolFailed, ToolResult, ToolStarted
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
RUN = "run-1"
CALL = "toolu_01"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(autojump_threshold=0)


async def run_to_rest(
    root: pathlib.Path,
    tools: tether.ToolRegistry,
    args: dict[str, Any],
    clock: VirtualClock | None = None,
    **budgets: Any,
) -> Any:
    model = tether.ScriptedModel([[use(CALL, "act", args)], "all done"])
    clock = clock or VirtualClock(autojump_threshold=0)
    async with Supervisor(tether.FileStore(root), model=model, tools=tools, clock=clock) as sup:
        await sup.start(RUN, "go", budgets=Budgets(**budgets))
        await sup.wait(RUN, timeout=WAIT)
        return await sup.inspect(RUN)


def slow_then_quick(
    attempts: list[int], *, slow_until: int, clock: VirtualClock, **options: Any
) -> Any:
    tools = tether.ToolRegistry()

    @tools.tool(timeout=60, **options)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        attempts.append(ctx.attempt)
        if ctx.attempt <= slow_until:
            await clock.sleep(3600)
        return f"acted on {item} (attempt {ctx.attempt})"

    return tools


@pytest.mark.parametrize("policy", ["rerun", "idempotency_key"])
async def test_a_timed_out_call_safe_to_repeat_runs_again(
    tmp_path: pathlib.Path, policy: str, clock: VirtualClock
) -> None:
    attempts: list[int] = []
    tools = slow_then_quick(attempts, slow_until=2, policy=policy, retries=2, clock=clock)
    view = await run_to_rest(tmp_path, tools, {"item": "a"}, clock)

    assert view.status is RunStatus.DONE
    assert attempts == [1, 2, 3]
    events = await read_events(tmp_path, RUN)
    assert [e.attempt for e in of_type(events, ToolStarted)] == [1, 2, 3]
    failed = of_type(events, ToolFailed)
    assert [(f.attempt, f.timed_out) for f in failed] == [(1, True), (2, True)]
    assert failed[0].error == "timed out after 60 s"
    assert result_of(events, CALL).content == "acted on a (attempt 3)"
    assert view.tool_calls == 3  # every attempt counts in the tool budget


async def test_a_call_that_keeps_timing_out_gets_an_error_result_when_retries_run_out(
    tmp_path: pathlib.Path, clock: VirtualClock
) -> None:
    attempts: list[int] = []
    tools = slow_then_quick(attempts, slow_until=99, policy="rerun", retries=1, clock=clock)
    view = await run_to_rest(tmp_path, tools, {"item": "a"}, clock)

    assert view.status is RunStatus.DONE  # the model heard the error and answered
    assert attempts == [1, 2]
    result = result_of(await read_events(tmp_path, RUN), CALL)
    assert not result.ok
    assert result.content == "timed out after 60 s (after 2 attempts)"


async def test_a_timed_out_escalate_call_goes_to_a_person_and_is_not_run_again(
    tmp_path: pathlib.Path, clock: VirtualClock
) -> None:
    attempts: list[int] = []
    tools = slow_then_quick(attempts, slow_until=99, policy="escalate", retries=3, clock=clock)
    view = await run_to_rest(tmp_path, tools, {"item": "a"}, clock)

    assert view.status is RunStatus.NEEDS_ATTENTION
    assert view.pending == (CALL,)
    assert attempts == [1]  # its outcome is unknown: running it again could repeat it
    reason = "act attempt 1 ended without a result (timed out after 60 s); outcome unknown"
    assert reason in view.reason
    (escalated,) = of_type(await read_events(tmp_path, RUN), Escalated)
    assert escalated.call_id == CALL


async def test_a_timed_out_verify_call_is_verified_before_it_runs_again(
    tmp_path: pathlib.Path, clock: VirtualClock
) -> None:
    attempts: list[int] = []
    landed: set[str] = set()
    verified: list[int] = []
    tools = tether.ToolRegistry()

    async def check(item: str, ctx: tether.ToolContext) -> str | None:
        verified.append(ctx.attempt)
        return f"found {item}" if item in landed else None

    @tools.tool(policy="verify", verify=check, timeout=60, retries=2)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            await clock.sleep(3600)  # times out without landing
        landed.add(item)
        await clock.sleep(3600)  # times out after landing: the verify finds it
        return "unreachable"

    view = await run_to_rest(tmp_path, tools, {"item": "a"}, clock)
    assert view.status is RunStatus.DONE
    assert attempts == [1, 2]
    assert verified == [1, 2]
    assert result_of(await read_events(tmp_path, RUN), CALL).content == "found a"


async def test_an_error_in_retry_on_is_retried_whatever_the_policy(tmp_path: pathlib.Path) -> None:
    attempts: list[int] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="escalate", retries=2, retry_on=ConnectionError)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionResetError("peer reset")
        return "acted"

    view = await run_to_rest(tmp_path, tools, {"item": "a"})
    assert view.status is RunStatus.DONE
    assert attempts == [1, 2, 3]
    events = await read_events(tmp_path, RUN)
    assert [f.error for f in of_type(events, ToolFailed)] == [
        "ConnectionResetError: peer reset"
    ] * 2
    assert result_of(events, CALL).content == "acted"


async def test_an_error_not_in_retry_on_is_the_result_at_once(tmp_path: pathlib.Path) -> None:
    attempts: list[int] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", retries=5, retry_on=ConnectionError)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        attempts.append(ctx.attempt)
        raise ValueError("no such item")

    await run_to_rest(tmp_path, tools, {"item": "a"})
    assert attempts == [1]
    result = result_of(await read_events(tmp_path, RUN), CALL)
    assert (result.ok, result.content) == (False, "ValueError: no such item")


async def test_retries_count_against_the_tool_budget(
    tmp_path: pathlib.Path, clock: VirtualClock
) -> None:
    attempts: list[int] = []
    tools = slow_then_quick(attempts, slow_until=99, policy="rerun", retries=5, clock=clock)
    view = await run_to_rest(tmp_path, tools, {"item": "a"}, clock, max_tool_calls=2)
    assert view.status is RunStatus.FAILED
    assert "tool call budget exhausted: 2 made, 1 more needed, limit 2" in view.reason
    assert attempts == [1, 2]


async def test_retries_back_off_between_attempts(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", retries=3, retry_on=ConnectionError)
    async def act(item: str, ctx: tether.ToolContext) -> str:
        """Act on an item."""
        if ctx.attempt < 4:
            raise ConnectionError("down")
        return "up"

    model = tether.ScriptedModel([[use(CALL, "act", {"item": "a"})], "ok"])
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=model,
        tools=tools,
        clock=VirtualClock(autojump_threshold=0),
        jitter=lambda: 0.5,
    ) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    # Each attempt started at the retry time the failure before it named, not a moment before.
    events = await read_events(tmp_path, RUN)
    failures, starts = of_type(events, ToolFailed), of_type(events, ToolStarted)
    delays = (1.0, 2.0, 4.0)
    assert [f.retry_at for f in failures] == [
        f.at + d for f, d in zip(failures, delays, strict=True)
    ]
    assert [f.retry_at for f in failures] == [s.at for s in starts[1:]]


async def test_a_raising_verify_is_its_calls_error_and_spares_a_slow_sibling(
    tmp_path: pathlib.Path,
) -> None:
    """Two dangling calls of one turn: a verify that raises, and a slow rerun call beside it."""
    effects: list[str] = []
    tools = tether.ToolRegistry()

    async def broken_check(order: str) -> str | None:
        raise RuntimeError("verify backend down")

    @tools.tool(policy="verify", verify=broken_check)
    async def refund(order: str) -> str:
        """Refund an order."""
        effects.append(f"refund {order}")
        return "refunded"

    @tools.tool(policy="idempotency_key")
    async def ship(order: str) -> str:
        """Ship an order (slowly)."""
        await anyio.sleep(0.3)
        effects.append(f"ship {order}")
        return "shipped"

    from ._helpers import craft, manifest_for

    model = tether.ScriptedModel(
        [[use("toolu_r", "refund", {"order": "o1"}), use("toolu_s", "ship", {"order": "o1"})], "ok"]
    )
    from tether.journal import ModelResponse, RunStarted

    await craft(
        tmp_path,
        RUN,
        [
            RunStarted(
                run_id=RUN,
                manifest=manifest_for(model, tools),
                messages=[{"role": "user", "content": "go"}],
            ),
            ModelResponse(
                message={
                    "role": "assistant",
                    "content": [
                        use("toolu_r", "refund", {"order": "o1"}),
                        use("toolu_s", "ship", {"order": "o1"}),
                    ],
                }
            ),
            ToolStarted(call_id="toolu_r", name="refund"),
            ToolStarted(call_id="toolu_s", name="ship"),
        ],
    )
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    refund_result = result_of(events, "toolu_r")
    assert (refund_result.ok, refund_result.content) == (
        False,
        "verify failed: RuntimeError: verify backend down",
    )
    assert result_of(events, "toolu_s").content == "shipped"
    assert effects == ["ship o1"]  # the sibling's effect completed, once
    assert len([e for e in of_type(events, ToolResult) if e.call_id == "toolu_s"]) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds"),
        ({"timeout": float("nan")}, "timeout must be a positive number of seconds"),
        ({"retries": -1}, "retries must be a whole number >= 0"),
        ({"retries": 1, "retry_on": (ValueError, 3)}, "retry_on must hold exception types"),
        ({"retry_on": ValueError}, "retry_on needs retries=N"),
    ],
)
def test_bad_timeout_and_retry_options_are_refused(options: dict[str, Any], message: str) -> None:
    tools = tether.ToolRegistry()

    async def act(item: str) -> str:
        """Act."""
        return item

    with pytest.raises(tether.ToolDefinitionError, match=message):
        tools.register(act, **options)
