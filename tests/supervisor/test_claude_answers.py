"""Claude as it really answers, through the real SDK against a strict fake of the Messages API.

The fake (``tests/models/_messages_api.py``) validates every request the way the API does:
the body's shape against the SDK's own request types, tool_use/tool_result pairing, thinking
signatures, cache breakpoints. A request it accepts is one the real API would accept, so each
test here shows that what tether journals and sends back is a valid continuation of the run.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import tether
from tether.journal import ModelFailed, ModelResponse, ToolStarted
from tether.models import TextBlock
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..models._messages_api import (
    MessagesAPI,
    answer,
    api_error,
    server_tool_use,
    text,
    thinking,
    tool_use,
    truncated_tool_use,
    web_search_result,
)
from ._helpers import WAIT, of_type, read_events, result_of

MODEL = "claude-sonnet-4-6"
RUN = "run-1"
REPO = pathlib.Path(__file__).resolve().parents[2]
SECRETISH = "sk-ant-api03-" + "x" * 40  # a credential-shaped placeholder the model thinks about


def mail_tools(sent: list[str]) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(body)
        return "sent"

    return tools


@asynccontextmanager
async def claude(api: MessagesAPI, **options: Any) -> AsyncIterator[tether.AnthropicModel]:
    async with api.client() as client:
        yield tether.AnthropicModel(MODEL, client=client, **{"max_tokens": 2048, **options})


async def drive(
    root: pathlib.Path,
    api: MessagesAPI,
    tools: tether.ToolRegistry,
    *,
    on_text: Any = None,
    **options: Any,
) -> Any:
    async with (
        claude(api, **options) as model,
        Supervisor(
            tether.FileStore(root),
            model=model,
            tools=tools,
            on_text=on_text,
            clock=VirtualClock(autojump_threshold=0),
        ) as sup,
    ):
        with contextlib.suppress(tether.RunExistsError):  # resumed
            await sup.start(RUN, "Tell Dana her refund is done.")
        await sup.wait(RUN, timeout=WAIT)
        return await sup.inspect(RUN)


async def test_a_tool_call_cut_off_by_max_tokens_is_not_run_and_the_api_accepts_the_rest(
    tmp_path: pathlib.Path,
) -> None:
    sent: list[str] = []
    api = MessagesAPI(
        answer(text("Sending."), truncated_tool_use("toolu_1", "send_email", '{"to": "dana",')),
        answer(tool_use("toolu_2", "send_email", {"to": "dana", "body": "Hi Dana, done."})),
        answer(text("Sent.")),
    )
    view = await drive(tmp_path, api, mail_tools(sent))
    api.assert_all_answered()
    assert view.status is RunStatus.DONE
    assert sent == ["Hi Dana, done."]
    first = result_of(await read_events(tmp_path, RUN), "toolu_1")
    assert not first.ok
    assert "cut off by max_tokens" in first.content


async def test_thinking_with_a_secret_shaped_text_survives_redaction_and_a_resume(
    tmp_path: pathlib.Path,
) -> None:
    """The default redactor must not touch the model's thinking, or its signature fails."""
    sent: list[str] = []
    thought = thinking(f"The user pasted {SECRETISH}; I must not repeat it. I'll send the email.")
    first = MessagesAPI(
        answer(thought, tool_use("toolu_1", "send_email", {"to": "dana", "body": "Done."})),
        api_error(529, "overloaded_error", "Overloaded", retry_after="600"),
    )
    tools = mail_tools(sent)
    params = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    async with (
        claude(first, **params) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup,
    ):
        await sup.start(RUN, "Tell Dana her refund is done.")
        with anyio.fail_after(WAIT):
            while first.calls < 2:  # the answer with the tool result was sent back: accepted
                await anyio.sleep(0.01)
    assert first.rejections == []
    events = await read_events(tmp_path, RUN)
    (response,) = of_type(events, ModelResponse)
    assert response.message["content"][0] == thought  # journaled exactly, signature and all

    # A new supervisor (a new process, as far as the run can tell) resumes; the fake checks
    # that the thinking block comes back unchanged and first, with the tool result.
    second = MessagesAPI(answer(text("Email sent.")))
    view = await drive(tmp_path, second, tools, **params)
    second.assert_all_answered()
    assert view.status is RunStatus.DONE, view.reason
    assert sent == ["Done."]


async def test_server_tools_are_declared_sent_and_their_blocks_replayed(
    tmp_path: pathlib.Path,
) -> None:
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    api = MessagesAPI(
        answer(
            server_tool_use("srvtoolu_01", "web_search", {"query": "refund policy"}),
            web_search_result("srvtoolu_01", [("https://kite.example/refunds", "Refunds")]),
            stop_reason="pause_turn",
        ),
        answer(text("Refunds take five days.")),
    )
    view = await drive(tmp_path, api, mail_tools([]), server_tools=[search])
    api.assert_all_answered()
    assert view.status is RunStatus.DONE
    assert view.final_text == "Refunds take five days."
    assert api.exchanges[0].body["tools"][-1] == search
    assert api.exchanges[1].continues_pause  # the paused turn went back as it was
    events = await read_events(tmp_path, RUN)
    assert of_type(events, ToolStarted) == []
    started = events[0]
    assert isinstance(started, tether.journal.RunStarted)
    assert started.manifest.model_params["server_tools"] == [search]


async def test_a_refusal_ends_the_run_saying_so(tmp_path: pathlib.Path) -> None:
    api = MessagesAPI(answer(text("I can't help with that."), stop_reason="refusal"))
    view = await drive(tmp_path, api, mail_tools([]))
    assert view.status is RunStatus.FAILED
    assert view.reason == "the model refused to continue (stop_reason refusal)"


async def test_a_refusal_with_details_says_them(tmp_path: pathlib.Path) -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "This could enable harm."}
    api = MessagesAPI(answer(text("I can't."), stop_reason="refusal", stop_details=details))
    view = await drive(tmp_path, api, mail_tools([]))
    assert view.status is RunStatus.FAILED
    assert (
        view.reason == 'the model refused to continue (category cyber): "This could enable harm."'
    )


async def test_a_large_max_tokens_streams_and_is_journaled_once_whole(
    tmp_path: pathlib.Path,
) -> None:
    api = MessagesAPI(answer(text("A long, careful answer.")))
    pieces: list[tuple[str, str]] = []
    view = await drive(
        tmp_path, api, mail_tools([]), max_tokens=32_000, on_text=lambda r, t: pieces.append((r, t))
    )
    api.assert_all_answered()
    assert view.status is RunStatus.DONE
    assert api.exchanges[0].stream  # the SDK would refuse this request without streaming
    assert "".join(t for _, t in pieces) == "A long, careful answer."
    assert {r for r, _ in pieces} == {RUN}
    events = await read_events(tmp_path, RUN)
    assert len(of_type(events, ModelResponse)) == 1  # once, whole


async def test_a_stream_that_breaks_off_is_asked_again_and_nothing_partial_is_kept(
    tmp_path: pathlib.Path,
) -> None:
    api = MessagesAPI(
        api_error(529, "overloaded_error", "Overloaded", in_stream=True),
        answer(text("Second time lucky.")),
    )

    async with (
        claude(api, max_tokens=32_000) as model,
        Supervisor(
            tether.FileStore(tmp_path), model=model, clock=VirtualClock(autojump_threshold=0)
        ) as sup,
    ):
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    events = await read_events(tmp_path, RUN)
    assert [f.kind for f in of_type(events, ModelFailed)] == ["transient"]
    assert len(of_type(events, ModelResponse)) == 1


async def test_prompt_caching_end_to_end(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun", cache_control={"type": "ephemeral"})
    async def lookup(q: str) -> str:
        """Look a policy up."""
        return "policy text"

    system: list[TextBlock] = [
        {"type": "text", "text": "You are Kitebase support."},
        {"type": "text", "text": "Policies: ...", "cache_control": {"type": "ephemeral"}},
    ]
    usage = {"cache_creation_input_tokens": 1200, "cache_read_input_tokens": 0}
    api = MessagesAPI(
        answer(tool_use("toolu_1", "lookup", {"q": "refunds"}), usage=usage),
        answer(text("Done."), usage={"cache_read_input_tokens": 1200}),
    )
    async with (
        claude(api) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup,
    ):
        await sup.start(RUN, "refunds?", system=system)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    api.assert_all_answered()
    for exchange in api.exchanges:
        assert exchange.body["system"] == system
        assert exchange.body["tools"][0]["cache_control"] == {"type": "ephemeral"}
    usages = [e.usage for e in of_type(await read_events(tmp_path, RUN), ModelResponse)]
    assert (usages[0].cache_creation_input_tokens, usages[1].cache_read_input_tokens) == (
        1200,
        1200,
    )
    assert view.input_tokens + view.output_tokens < 2400  # the cache is counted apart


async def test_a_tool_returns_an_image_the_api_accepts(tmp_path: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def screenshot(url: str) -> tether.ContentBlocks:
        """Screenshot a page."""
        png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
        return tether.ContentBlocks([{"type": "image", "source": png}])

    api = MessagesAPI(
        answer(tool_use("toolu_1", "screenshot", {"url": "https://kite.example"})),
        answer(text("I see the page.")),
    )
    async with (
        claude(api) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup,
    ):
        await sup.start(RUN, "look")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    api.assert_all_answered()
    result = api.exchanges[1].body["messages"][-1]["content"][0]
    assert result["content"][0]["type"] == "image"


@pytest.mark.slow
def test_a_kill_between_a_signed_answer_and_its_tools_resumes_into_a_valid_request(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL right after the answer (thinking + a tool call) is saved; a fresh process, with
    a fresh fake (the same signing secret, as the real API's), runs the tool once and its
    next request passes every check."""
    child = [sys.executable, "-m", "tests.supervisor._claude_child", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    killed = subprocess.run(
        child,
        cwd=REPO,
        env={**env, "TETHER_CRASH_AT": "model_saved"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr
    resumed = subprocess.run(child, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-1] == "done sent=['Done.'] requests=1"
