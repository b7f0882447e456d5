"""An Agents SDK run streams its text to the supervisor's watcher, and journals whole responses.

The agent's model is the SDK's ``OpenAIResponsesModel`` on the real ``openai`` SDK, against the
strict fake of the Responses API served over TCP (``tests/models/_wire``): a streamed request
gets real server-sent events, one per chunk. With ``Supervisor(on_text=...)`` each step's one
real request is made streaming: its text reaches the watcher as it arrives, the response the
journal keeps is the one ``response.completed`` carries, and a run resumed in a new process
replays the journaled responses without streaming them again. A stream cut short is never
an answer: nothing of it is journaled, and the run asks again after a backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, function_tool

from tether.integrations.openai_agents import TetherRunner
from tether.journal import ModelResponse
from tether.supervisor import RunStatus, Supervisor

from ..models import _responses_api as responses
from ..models._wire import Cut, Server, after, before, served
from ..supervisor._helpers import WAIT, of_type, read_events
from ._streams import FINAL, PROMPT, RUN, SAID, check_asked_again, watched


@function_tool(needs_approval=True)
async def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up: its total."""
    return {"order": order, "total": 30.0}


def respond(body: dict[str, Any]) -> responses.Answer:
    answered = any(item.get("type") == "function_call_output" for item in body["input"])
    if answered:
        return responses.answer(FINAL)
    return responses.answer(
        responses.message(SAID),
        responses.function_call("call_1", "lookup_order", {"order": "A-1"}),
    )


def runner(url: str, http: httpx2.AsyncClient) -> TetherRunner:
    client = openai.AsyncOpenAI(
        api_key="fake", base_url=f"{url}/v1", http_client=http, max_retries=0
    )
    model = OpenAIResponsesModel(model="gpt-5-mini", openai_client=client)
    agent = Agent(name="desk", instructions="Look orders up.", model=model, tools=[lookup_order])
    return TetherRunner(
        agent,
        run_config=RunConfig(tracing_disabled=True),
        tools={"lookup_order": {"policy": "rerun"}},
    )


@asynccontextmanager
async def supervised(
    root: Path, server: Server, http: httpx2.AsyncClient, seen: list[str]
) -> AsyncIterator[tuple[Supervisor, TetherRunner]]:
    app = runner(server.url, http)
    async with watched(root, app, seen) as sup:
        yield sup, app


async def test_the_text_streams_as_it_comes_and_a_resumed_run_does_not_stream_it_again(
    tmp_path: Path,
) -> None:
    api = responses.ResponsesAPI(respond=respond)
    first: list[str] = []
    resumed: list[str] = []
    async with served(api) as server, httpx2.AsyncClient() as http:
        async with supervised(tmp_path, server, http, first) as (sup, _):
            await sup.start(RUN, PROMPT)
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
            (pending,) = (await sup.inspect(RUN)).pending
        async with supervised(tmp_path, server, http, resumed) as (sup, app):  # a new process
            await sup.decide(RUN, pending, approved=True, by="priya")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
            result = await app.result(sup, RUN)
    assert len(first) > 1  # pieces, as they arrived
    assert "".join(first) == SAID
    assert "".join(resumed) == FINAL  # the journaled first response is not streamed again
    assert result.final_output == FINAL
    assert [bool(b.get("stream")) for b in api.bodies] == [True, True]  # two requests in all
    assert all(s.cut is None for s in server.sent)

    first_saved, last_saved = of_type(await read_events(tmp_path, RUN), ModelResponse)
    kinds = [b["type"] for b in first_saved.message["content"]]
    assert kinds == ["text", "tool_use", "agent_step"]
    assert first_saved.message["content"][0]["text"] == SAID
    assert first_saved.usage.output_tokens > 1  # the completed response's count
    assert last_saved.message["content"][0]["text"] == FINAL


@pytest.mark.parametrize(
    "cut",
    [
        Cut(before("response.completed")),
        Cut(after(lambda e: e.type == "response.function_call_arguments.delta", 1)),
        Cut(after(lambda e: e.type == "response.output_text.delta", 1), how="reset"),
    ],
    ids=["a clean end before response.completed", "a clean end inside the call", "a reset"],
)
async def test_a_stream_cut_short_is_never_journaled_and_is_asked_again(
    tmp_path: Path, cut: Cut
) -> None:
    api = responses.ResponsesAPI(respond=respond)
    seen: list[str] = []
    async with served(api) as server, httpx2.AsyncClient() as http:
        server.cut(cut)
        async with supervised(tmp_path, server, http, seen) as (sup, _):
            await sup.start(RUN, PROMPT)
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    assert [s.cut for s in server.sent] == [cut, None]
    await check_asked_again(tmp_path, seen)
