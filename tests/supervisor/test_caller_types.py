"""What a caller gives the Supervisor's verbs and ``start`` is checked before anything is
written: a wrongly typed argument (``by=5``) is a ``TypeError`` naming the field, and the
journal stays readable. (msgspec checks types when it decodes a record, not when one is
made: such a record was written, acknowledged, and then read as a corrupt journal.)"""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import tether
from tether.journal import FileStore
from tether.supervisor import RunStatus, Supervisor, fold

pytestmark = pytest.mark.timeout(60)
use = tether.ScriptedModel.tool_use


def _tools() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", approval=True)
    async def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    return tools


async def test_a_wrongly_typed_answer_is_refused_and_the_journal_still_reads(
    tmp_path: pathlib.Path,
) -> None:
    model = tether.ScriptedModel([[use("toolu_1", "refund", {"order": "o-1"})], "done"])
    bad: list[Any] = [5]
    async with Supervisor(FileStore(tmp_path), model=model, tools=_tools()) as sup:
        await sup.start("r", "refund o-1")
        assert await sup.wait("r", timeout=10) is RunStatus.WAITING_FOR_APPROVAL
        calls: list[tuple[Callable[[], Awaitable[Any]], str]] = [
            (lambda: sup.signal("r", "paid", 1, by=bad[0]), "$.by"),
            (lambda: sup.decide("r", "toolu_1", approved=True, by="priya", note=bad[0]), "$.note"),
            (lambda: sup.cancel("r", reason=bad[0]), "$.reason"),
        ]
        for call, field in calls:
            with pytest.raises(TypeError) as caught:
                await call()
            assert field in str(caught.value)
            assert "answer for run 'r'" in str(caught.value)
        with pytest.raises(TypeError, match="signal_id: expected a string, got int"):
            await sup.signal("r", "paid", 1, signal_id=bad[0])
        state = fold(await FileStore(tmp_path).read("r"))  # reads: nothing bad was written
        assert state.finished is None
        assert not any(c.decision for c in state.calls.values())
        await sup.decide("r", "toolu_1", approved=True, by="priya")
        assert await sup.wait("r", timeout=10) is RunStatus.DONE


@pytest.mark.parametrize(
    ("prompt", "budgets", "error", "words"),
    [
        (None, None, TypeError, "prompt: expected a string or a list of messages, got NoneType"),
        (5, None, TypeError, "got int"),
        ([], None, ValueError, "prompt: no messages"),
        ("hi", {"max_model_calls": 3}, TypeError, "budgets: expected tether.Budgets, got dict"),
        ("hi", tether.Budgets(max_model_calls="3"), ValueError, "max_model_calls='3'"),  # type: ignore[arg-type]
        ("hi", tether.Budgets(deadline_s="10"), ValueError, "deadline_s='10'"),  # type: ignore[arg-type]
        ("hi", tether.Budgets(max_model_calls=-1), ValueError, "cannot be below zero"),
        ([{"role": "user", "content": object()}], None, TypeError, "the start of run 'r'"),
    ],
)
async def test_a_start_with_a_bad_prompt_or_budgets_writes_nothing(
    tmp_path: pathlib.Path, prompt: Any, budgets: Any, error: type[Exception], words: str
) -> None:
    model = tether.ScriptedModel(["done"])
    async with Supervisor(FileStore(tmp_path), model=model, tools=_tools()) as sup:
        with pytest.raises(error) as caught:
            await sup.start("r", prompt, budgets=budgets)
        assert words in str(caught.value)
        assert not await FileStore(tmp_path).exists("r")
        await sup.start("r", "hi")  # the id is still free
        assert await sup.wait("r", timeout=10) is RunStatus.DONE
    with anyio.fail_after(5):
        assert fold(await FileStore(tmp_path).read("r")).finished is not None


async def test_wait_says_which_run_did_not_rest_in_time(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def slow() -> str:
        """Work a while."""
        await anyio.sleep(60)
        return "done"

    model = tether.ScriptedModel([[use("toolu_1", "slow", {})], "done"])
    async with Supervisor(FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start("r", "work")
        with pytest.raises(TimeoutError) as caught:
            await sup.wait("r", timeout=0.5)
        assert str(caught.value) == "run 'r' did not come to rest within 0.5 s (it is running)"
        with pytest.raises(TypeError, match="timeout: expected seconds or None, got str"):
            await sup.wait("r", timeout="1")  # type: ignore[arg-type]
        await sup.cancel("r", reason="enough")


async def test_an_answer_to_an_exited_supervisor_says_so(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel(["done"])
    sup = Supervisor(FileStore(tmp_path), model=model, tools=_tools())
    async with sup:
        await sup.start("r", "hi")
        assert await sup.wait("r", timeout=10) is RunStatus.DONE
    with pytest.raises(RuntimeError, match="the supervisor is not entered"):
        await sup.signal("r", "paid", 1)
    with pytest.raises(RuntimeError, match="the supervisor is not entered"):
        await sup.cancel("r", reason="x")
    assert (await sup.inspect("r")).status is RunStatus.DONE  # reading still works
