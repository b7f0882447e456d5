"""Child runs: a tool starts another agent as a run of its own and its call waits for it.

The child's run id comes from the parent's and the call's, and it is created only after the
parent's wait for it is durable, so a crash never starts it twice; its answer becomes the
call's result, and what it spends counts towards the parent's budgets.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest

import tether
from tether import operate
from tether.journal import ChildEnded, RunStarted, Waiting
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor

from .._plain import plain
from ._helpers import WAIT, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
PARENT = "run-lead"
CHILD = "run-lead.toolu_1"
REPO = pathlib.Path(__file__).resolve().parents[2]


def answer(messages: list[Message]) -> Any:
    """The lead asks a researcher (a child run), then reports; the researcher answers."""
    first = str(messages[0]["content"])
    step = sum(1 for m in messages if m["role"] == "assistant")
    if first.startswith("research"):
        return "Refunds take five days." if step == 0 else "?"
    if step == 0:
        return [use("toolu_1", "ask_researcher", {"question": "refund policy"})]
    result = plain(messages[-1]["content"])[0]["content"]
    return f"Told the customer: {result}"


def lead_tools(**child_options: Any) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def ask_researcher(question: str) -> tether.Wait:
        """Ask the research agent and wait for its report."""
        return tether.start_child(f"research: {question}", **child_options)

    return tools


async def wait_for_status(sup: Supervisor, run_id: str, want: RunStatus) -> None:
    """Until run ``run_id`` exists and has status ``want``."""
    with anyio.fail_after(WAIT):
        while True:
            try:
                if (await sup.inspect(run_id)).status is want:
                    return
            except tether.RunNotFoundError:
                pass
            await anyio.sleep(0.02)


async def test_a_child_runs_on_its_own_and_its_answer_is_the_calls_result(
    tmp_path: pathlib.Path,
) -> None:
    model = tether.ScriptedModel(answer)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
        await sup.start(PARENT, "a customer asks about refunds")
        await wait_for_status(sup, PARENT, RunStatus.DONE)
        parent, child = await sup.inspect(PARENT), await sup.inspect(CHILD)
    assert parent.final_text == "Told the customer: Refunds take five days."
    assert child.status is RunStatus.DONE
    events = await read_events(tmp_path, PARENT)
    (waiting,) = of_type(events, Waiting)
    assert waiting.child is not None
    assert waiting.child["run_id"] == CHILD
    (ended,) = of_type(events, ChildEnded)
    assert (ended.child, ended.status, ended.model_calls) == (CHILD, "done", 1)
    started = (await read_events(tmp_path, CHILD))[0]
    assert isinstance(started, RunStarted)
    assert (started.parent, started.parent_call) == (PARENT, "toolu_1")
    assert parent.input_tokens > child.input_tokens  # the child's tokens count in the parent's


async def test_a_childs_spending_counts_towards_its_parents_budget(tmp_path: pathlib.Path) -> None:
    model = tether.ScriptedModel(answer)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
        await sup.start(PARENT, "a customer asks", budgets=tether.Budgets(max_model_calls=2))
        await wait_for_status(sup, PARENT, RunStatus.FAILED)
        parent = await sup.inspect(PARENT)
    # The lead's own call, and the researcher's one (its budget was what the lead had left).
    assert parent.reason == "model call budget exhausted: 2 of 2"
    child_start = (await read_events(tmp_path, CHILD))[0]
    assert isinstance(child_start, RunStarted)
    assert child_start.budgets.max_model_calls == 1


def researcher_held(hold: anyio.Event) -> tether.ScriptedModel:
    """``answer``, where the researcher (the child) answers only once ``hold`` is set."""

    async def slow_answer(messages: list[Message]) -> Any:
        if str(messages[0]["content"]).startswith("research"):
            await hold.wait()
        return answer(messages)

    return tether.ScriptedModel(slow_answer)


async def test_cancelling_the_parent_cancels_its_children(tmp_path: pathlib.Path) -> None:
    model = researcher_held(anyio.Event())
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
        await sup.start(PARENT, "a customer asks")
        await wait_for_status(sup, PARENT, RunStatus.SLEEPING)
        assert "waiting for child run run-lead.toolu_1" in (await sup.inspect(PARENT)).reason
        # The wait is durable before the child is created: cancel once it exists (a parent
        # cancelled in between never creates it).
        await wait_for_status(sup, CHILD, RunStatus.RUNNING)
        await sup.cancel(PARENT, reason="customer left")
        await wait_for_status(sup, CHILD, RunStatus.CANCELLED)
        child = await sup.inspect(CHILD)
    assert child.reason == "its parent: customer left"


async def test_a_cancellation_says_what_became_of_the_childrens(tmp_path: pathlib.Path) -> None:
    """The parent sleeps for its child, so the cancellation of the parent is recorded; the
    child's process holds it, so its cancellation is queued: the acknowledgement says both."""
    model = researcher_held(anyio.Event())
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
        await sup.start(PARENT, "a customer asks")
        await wait_for_status(sup, PARENT, RunStatus.SLEEPING)
        await wait_for_status(sup, CHILD, RunStatus.RUNNING)
        async with tether.FileStore(tmp_path) as other:  # as `tether cancel` does
            done = await operate.cancel(other, PARENT, reason="customer left")
        said = operate.acknowledgement(PARENT, done)
        await wait_for_status(sup, CHILD, RunStatus.CANCELLED)
    assert said.startswith(f"recorded: run {PARENT} cancelled: customer left (seq ")
    assert said.endswith(f"; its child runs cancelled too: {CHILD} (queued)")


@pytest.mark.parametrize(
    ("crash_at", "answers"),
    [
        ("result_saved", 1),  # the parent's wait is durable, the child not yet created
        ("model_answered:2", 2),  # the child's model answered, its answer not saved: asked again
        ("model_saved:2", 1),  # the child's answer is saved, the child killed before it ends
    ],
)
def test_a_kill_around_a_child_run_never_starts_it_twice(
    tmp_path: pathlib.Path, crash_at: str, answers: int
) -> None:
    """SIGKILL of the one process serving both runs, at each of those points; a fresh one
    finishes both, and the researcher was asked only as often as the kill requires."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    child_cmd = [sys.executable, "-m", "tests.supervisor._children_child", str(tmp_path)]
    killed = subprocess.run(
        child_cmd,
        cwd=REPO,
        env={**env, "TETHER_CRASH_AT": crash_at},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = subprocess.run(child_cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"lead done: Told the customer: Refunds take five days.; researcher answered {answers} "
        "time(s)"
    )


def test_tether_runs_and_show_link_parent_and_child(tmp_path: pathlib.Path) -> None:
    async def make() -> None:
        model = tether.ScriptedModel(answer)
        async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
            await sup.start(PARENT, "a customer asks about refunds")
            await wait_for_status(sup, PARENT, RunStatus.DONE)

    anyio.run(make)
    cli = (sys.executable, "-m", "tether.cli")
    runs = subprocess.run(
        [*cli, "runs", "--root", str(tmp_path)], capture_output=True, text=True, check=True
    )
    lines = runs.stdout.splitlines()
    (child_at,) = [i for i, line in enumerate(lines) if line.split()[0] == CHILD]
    assert lines[child_at].startswith(f"  {CHILD}")  # indented under its parent
    assert lines[child_at - 1].startswith(PARENT)
    assert f"child of {PARENT}" in lines[child_at]
    show = subprocess.run(
        [*cli, "show", "--root", str(tmp_path), PARENT], capture_output=True, text=True, check=True
    )
    assert f"waits for child run {CHILD}" in show.stdout
    assert f"child run {CHILD} ended done: Refunds take five days." in show.stdout
    _ = result_of


async def test_a_run_that_only_has_the_childs_id_is_not_adopted(tmp_path: pathlib.Path) -> None:
    """A run named ``PARENT.CALL`` that its run_started does not make this call's child (made
    by hand, say) is never read as the child: the call gets an error result saying so, and the
    stranger is left as it was."""
    store = tether.FileStore(tmp_path)
    model = tether.ScriptedModel(answer)
    async with Supervisor(store, model=model, tools=lead_tools(), resume=False) as sup:
        await sup.start(CHILD, "research: something else entirely")
        assert await sup.wait(CHILD, timeout=WAIT) is RunStatus.DONE
        await sup.start(PARENT, "a customer asks about refunds")
        await wait_for_status(sup, PARENT, RunStatus.DONE)
        parent = await sup.inspect(PARENT)
    events = await read_events(tmp_path, PARENT)
    assert of_type(events, ChildEnded) == []
    result = result_of(events, "toolu_1")
    assert not result.ok
    assert "exists that is not this call's child" in str(result.content)
    assert "Refunds take five days" not in (parent.final_text or "")
    stranger = await read_events(tmp_path, CHILD)
    assert of_type(stranger, ChildEnded) == []
    started = stranger[0]
    assert isinstance(started, RunStarted)
    assert started.parent is None


async def test_a_call_id_outside_the_run_id_alphabet_still_starts_its_child(
    tmp_path: pathlib.Path,
) -> None:
    """Some OpenAI-compatible servers name calls ``functions.ask:0``: the id is renamed before
    it is journaled, so the child's id is a valid run id and the parent finishes (it used to
    crash-loop behind the status ``waiting``)."""

    def colon_answer(messages: list[Message]) -> Any:
        reply = answer(messages)
        if isinstance(reply, list):
            return [{**reply[0], "id": "functions.ask_researcher:0"}]
        return reply

    model = tether.ScriptedModel(colon_answer)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=lead_tools()) as sup:
        await sup.start(PARENT, "a customer asks about refunds")
        await wait_for_status(sup, PARENT, RunStatus.DONE)
        parent = await sup.inspect(PARENT)
    assert parent.final_text == "Told the customer: Refunds take five days."
    assert parent.restarts == 0
    (waiting,) = of_type(await read_events(tmp_path, PARENT), Waiting)
    assert waiting.child is not None
    child_id = waiting.child["run_id"]
    assert child_id.startswith(f"{PARENT}.functions_ask_researcher_0-")
    assert (await read_events(tmp_path, child_id))[0].parent == PARENT  # type: ignore[union-attr]
