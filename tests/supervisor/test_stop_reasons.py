"""What the loop does with each stop reason, rich tool results, and prompt caching options.

Each stop reason's decision is journaled in the answer's own group, so a crash between the
answer and acting on it replays the same decision (checked here by killing at
``model_saved``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

import tether
from tether.journal import ModelResponse, RunFinished, RunStarted, ToolResult, ToolStarted
from tether.models import ContentBlock, OpaqueBlock, TextBlock
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, RecordingModel, of_type, read_events, result_of

use = tether.ScriptedModel.tool_use
stopped = tether.ScriptedModel.stopped
RUN = "run-1"
REPO = pathlib.Path(__file__).resolve().parents[2]


def email_tools(sent: list[str]) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(body)
        return "sent"

    return tools


async def run(root: pathlib.Path, script: list[Any], tools: tether.ToolRegistry) -> Any:
    model = RecordingModel(tether.ScriptedModel(script))
    async with Supervisor(tether.FileStore(root), model=model, tools=tools) as sup:
        await sup.start(RUN, "write to dana")
        await sup.wait(RUN, timeout=WAIT)
        return await sup.inspect(RUN), model


async def test_a_call_cut_off_by_max_tokens_is_never_run(tmp_path: pathlib.Path) -> None:
    sent: list[str] = []
    cut = use("toolu_1", "send_email", {"to": "dana@example.com", "body": "Hi Dana, we have"})
    script = [
        stopped("max_tokens", [cut]),
        [use("toolu_2", "send_email", {"to": "dana@example.com", "body": "Hi Dana, done."})],
        "sent the full email",
    ]
    view, model = await run(tmp_path, script, email_tools(sent))
    assert view.status is RunStatus.DONE
    assert sent == ["Hi Dana, done."]  # the half-written email never went out
    events = await read_events(tmp_path, RUN)
    first = result_of(events, "toolu_1")
    assert not first.ok
    assert "cut off by max_tokens" in first.content
    # The decision went out in the answer's own group: no tool_started for the cut call.
    answer = of_type(events, ModelResponse)[0]
    assert answer.stop_reason == "max_tokens"
    assert first.seq == answer.seq + 1
    assert [s.call_id for s in of_type(events, ToolStarted)] == ["toolu_2"]
    # The model heard why, as an error result.
    results = model.requests[1]["messages"][-1]["content"]
    assert results[0]["is_error"] is True


async def test_a_call_whose_arguments_could_not_be_read_is_answered_not_run(
    tmp_path: pathlib.Path,
) -> None:
    """An adapter marks arguments that are not JSON with ``input_error``: that call gets an
    error result in the answer's own group, its sibling runs, and the model sends it again."""
    sent: list[str] = []
    unreadable = {**use("call_1", "send_email", {}), "input_error": "not valid JSON: '{\"to\":'"}
    good = use("call_2", "send_email", {"to": "sam@example.com", "body": "Hi Sam."})
    script = [
        [unreadable, good],
        [use("call_3", "send_email", {"to": "dana@example.com", "body": "Hi Dana."})],
        "both sent",
    ]
    view, model = await run(tmp_path, script, email_tools(sent))
    assert view.status is RunStatus.DONE
    assert sent == ["Hi Sam.", "Hi Dana."]
    events = await read_events(tmp_path, RUN)
    answer = of_type(events, ModelResponse)[0]
    bad = result_of(events, "call_1")
    assert bad.seq == answer.seq + 1  # decided in the answer's own group
    assert not bad.ok
    assert bad.content == (
        "not run: the arguments of this call (send_email) could not be read: not valid JSON: "
        "'{\"to\":'; send the call again with arguments that are one JSON object"
    )
    assert [s.call_id for s in of_type(events, ToolStarted)] == ["call_2", "call_3"]
    results = model.requests[1]["messages"][-1]["content"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [
        ("call_1", True),
        ("call_2", False),
    ]


async def test_a_text_answer_cut_off_by_max_tokens_says_so(tmp_path: pathlib.Path) -> None:
    view, _ = await run(tmp_path, [stopped("max_tokens", "The refund was")], email_tools([]))
    assert view.status is RunStatus.DONE
    assert view.reason == "the answer was cut off by max_tokens; its last text is incomplete"
    assert view.final_text == "The refund was"


async def test_pause_turn_continues_the_same_turn(tmp_path: pathlib.Path) -> None:
    # Blocks of a server tool: tether does not know them, and keeps them as they came.
    searching: list[ContentBlock] = [
        OpaqueBlock(
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"q": "x"},
            }
        ),
        OpaqueBlock({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
    ]
    script = [stopped("pause_turn", searching), "Here is what I found."]
    view, model = await run(tmp_path, script, email_tools([]))
    assert view.status is RunStatus.DONE
    assert view.final_text == "Here is what I found."
    # The paused content went back as it was, so the model continued that turn.
    assert model.requests[1]["messages"][-1] == {"role": "assistant", "content": searching}
    events = await read_events(tmp_path, RUN)
    assert [e.stop_reason for e in of_type(events, ModelResponse)] == ["pause_turn", "end_turn"]
    assert of_type(events, ToolStarted) == []  # server tool calls are not the runtime's to run
    show = _show(tmp_path)
    assert 'stopped: pause_turn; server ran web_search(q="x")' in show


async def test_a_refusal_ends_the_run_saying_so(tmp_path: pathlib.Path) -> None:
    view, _ = await run(tmp_path, [stopped("refusal", "I can't help with that.")], email_tools([]))
    assert view.status is RunStatus.FAILED
    assert view.reason == "the model refused to continue (stop_reason refusal)"


async def test_a_full_context_window_ends_the_run(tmp_path: pathlib.Path) -> None:
    view, _ = await run(
        tmp_path, [stopped("model_context_window_exceeded", "and so")], email_tools([])
    )
    assert view.status is RunStatus.FAILED
    assert "no longer fits the model's context window" in view.reason


def test_a_kill_after_a_cut_off_answer_replays_the_same_decision(tmp_path: pathlib.Path) -> None:
    """Killed right after the cut-off answer is saved: the resumed run does not run the call."""
    child = [sys.executable, "-m", "tests.supervisor._stop_child", str(tmp_path)]
    first = subprocess.run(
        child,
        cwd=REPO,
        env={**os.environ, "TETHER_CRASH_AT": "model_saved"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert first.returncode == -9, first.stderr
    second = subprocess.run(
        child, cwd=REPO, capture_output=True, text=True, check=False, timeout=60
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == "done sent=['Hi Dana, done.']"


async def test_a_tool_can_return_content_blocks(tmp_path: pathlib.Path) -> None:
    png = "iVBORw0KGgo="
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def screenshot(url: str) -> tether.ContentBlocks:
        """Take a screenshot of a page."""
        return tether.ContentBlocks(
            [
                {"type": "text", "text": f"screenshot of {url}"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": png},
                },
            ]
        )

    script = [[use("toolu_1", "screenshot", {"url": "https://example.com"})], "I see a page."]
    view, model = await run(tmp_path, script, tools)
    assert view.status is RunStatus.DONE
    (block,) = model.requests[1]["messages"][-1]["content"]
    assert block["type"] == "tool_result"
    assert block["content"][1]["source"]["data"] == png  # sent as blocks, not as JSON text
    assert block["content"][0] == {"type": "text", "text": "screenshot of https://example.com"}
    result = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert result.blocks


async def test_bad_content_blocks_are_the_calls_error(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def broken() -> tether.ContentBlocks:
        """Return a block of no known type."""
        return tether.ContentBlocks([{"type": "video"}])

    view, _ = await run(tmp_path, [[use("toolu_1", "broken", {})], "ok"], tools)
    result = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert not result.ok
    assert "result block 0: type must be one of document, image, search_result, text" in str(
        result.content
    )
    assert view.status is RunStatus.DONE


async def test_system_blocks_and_tool_cache_control_are_sent_as_given_and_pinned(
    tmp_path: pathlib.Path,
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", cache_control={"type": "ephemeral"})
    async def lookup(q: str) -> str:
        """Look something up."""
        return "found"

    system: list[TextBlock] = [
        {"type": "text", "text": "You are Kitebase support."},
        {"type": "text", "text": "Long policy text...", "cache_control": {"type": "ephemeral"}},
    ]
    model = RecordingModel(tether.ScriptedModel([[use("toolu_1", "lookup", {"q": "x"})], "ok"]))
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "help", system=system)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    for request in model.requests:
        assert request["system"] == system
        assert request["tools"][0]["cache_control"] == {"type": "ephemeral"}
    started = (await read_events(tmp_path, RUN))[0]
    assert isinstance(started, RunStarted)
    assert started.manifest.system_blocks == system
    assert started.manifest.tools[0].cache_control == {"type": "ephemeral"}

    with pytest.raises(TypeError, match="list of text blocks"):
        async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
            await sup.start("run-2", "help", system=[{"type": "image"}])  # type: ignore[typeddict-item]


async def test_cache_tokens_count_towards_the_token_budget(tmp_path: pathlib.Path) -> None:
    usage = tether.journal.Usage(
        input_tokens=10, output_tokens=5, cache_creation_input_tokens=300, cache_read_input_tokens=0
    )
    script: list[Any] = [[use("toolu_1", "lookup", {"q": "x"})], "ok"]
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(q: str) -> str:
        """Look something up."""
        return "found"

    model = tether.ScriptedModel(script, usage=usage)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "help", budgets=tether.Budgets(max_tokens=300))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED
        view = await sup.inspect(RUN)
    assert view.reason == "token budget exhausted: 315 of 300"
    events = await read_events(tmp_path, RUN)
    assert isinstance(events[-1], RunFinished)
    assert of_type(events, ToolResult)[0].ok
    show = _show(tmp_path)
    assert "cache: 300 written, 0 read" in show
    assert "tokens 10 in / 5 out / 300 cache written / 0 cache read" in show


def _show(root: pathlib.Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli", "show", "--root", str(root), RUN],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout
