"""A pydantic-ai run streams its text and events to whoever watches, and journals whole responses.

With ``Supervisor(on_text=...)`` or an ``event_stream_handler``, each step's one real request is
made streaming (pydantic-ai's ``event_stream_handler`` mode): its text reaches the supervisor's
watcher and its events the application's handler as they arrive; the response journaled is the
one pydantic-ai assembled from the whole stream; a run resumed in a new process replays the
journaled responses without streaming them again (pydantic-ai's made-up events for them are
dropped). A stream cut short is never an answer: through pydantic-ai's ``OpenAIChatModel`` and
the real ``openai`` SDK against the strict Chat Completions fake on a real socket, nothing of it
is journaled, and the run asks again after a backoff.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

import tether
from tether.integrations.pydantic_ai import TetherAgent
from tether.journal import ModelResponse
from tether.supervisor import RunStatus, Supervisor

from ..models import _chat_api as chat
from ..models._wire import Cut, after, served
from ..supervisor._helpers import WAIT, of_type, read_events
from ._streams import FINAL, PROMPT, RUN, SAID, check_asked_again, watched


def desk(model: Any) -> Agent[None, str]:
    agent = Agent(model, instructions="Look orders up.", name="desk")

    @agent.tool_plain(requires_approval=True)
    async def lookup_order(order: str) -> dict[str, Any]:
        """Look an order up: its total."""
        return {"order": order, "total": 30.0}

    return agent


def stream_model(requests: list[int]) -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        requests.append(len(messages))
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            for word in FINAL.split(" "):
                yield word if word == FINAL.split(" ")[0] else f" {word}"
            return
        for piece in ("Looking order A-1 up", " — one moment."):
            yield piece
        calls: DeltaToolCalls = {
            1: DeltaToolCall(name="lookup_order", json_args='{"order": "A-1"}', tool_call_id="c1")
        }
        yield calls

    return FunctionModel(stream_function=stream)


def streamed_agent(
    requests: list[int], events: list[AgentStreamEvent] | None = None
) -> TetherAgent[str]:
    async def watch(ctx: RunContext[Any], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            assert events is not None
            events.append(event)

    return TetherAgent(
        desk(stream_model(requests)),
        tools={"lookup_order": {"policy": "rerun"}},
        event_stream_handler=None if events is None else watch,
    )


async def test_the_text_and_events_stream_as_they_come_and_a_resumed_run_does_not_stream_them_again(
    tmp_path: Path,
) -> None:
    requests: list[int] = []
    first_text: list[str] = []
    first_events: list[AgentStreamEvent] = []
    async with watched(tmp_path, streamed_agent(requests, first_events), first_text) as sup:
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        (pending,) = (await sup.inspect(RUN)).pending
    resumed_text: list[str] = []
    resumed_events: list[AgentStreamEvent] = []
    app = streamed_agent(requests, resumed_events)  # a new process
    async with watched(tmp_path, app, resumed_text) as sup:
        await sup.decide(RUN, pending, approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        result = await app.result(sup, RUN)
    assert len(requests) == 2  # one streamed request per response, none asked again
    assert first_text == ["Looking order A-1 up", " — one moment."]
    assert "".join(resumed_text) == FINAL  # the journaled first response is not streamed again
    assert len(resumed_text) == len(FINAL.split(" "))
    assert result.output == FINAL

    def texts(events: list[AgentStreamEvent]) -> str:
        said = []
        for e in events:
            if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart):
                said.append(e.part.content)
            elif isinstance(e, PartDeltaEvent) and isinstance(e.delta, TextPartDelta):
                said.append(e.delta.content_delta)
        return "".join(said)

    assert texts(first_events) == SAID
    assert texts(resumed_events) == FINAL

    first_saved, last_saved = of_type(await read_events(tmp_path, RUN), ModelResponse)
    assert [b["type"] for b in first_saved.message["content"]] == ["text", "tool_use", "agent_step"]
    assert first_saved.message["content"][0]["text"] == SAID
    assert first_saved.message["content"][1]["input"] == {"order": "A-1"}
    assert last_saved.message["content"][0]["text"] == FINAL


async def test_without_a_watcher_a_step_makes_one_plain_request(tmp_path: Path) -> None:
    requests: list[int] = []
    app = streamed_agent(requests)  # FunctionModel has no function for a plain request
    async with Supervisor(
        tether.FileStore(tmp_path), model=app.model, tools=app.tools, sweep_interval=None
    ) as sup:
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        reason = (await sup.inspect(RUN)).reason
    assert "support non-streamed requests" in reason
    assert requests == []


# -- a stream cut short, through pydantic-ai's OpenAI model on a real socket ----------------


def _chat_fake() -> chat.ChatAPI:
    first = chat.answer(SAID, chat.call("call_01", "lookup_order", {"order": "A-1"}))
    return chat.ChatAPI(first, first, chat.answer(FINAL))


def _argument(event: Any) -> bool:
    choices = event.data.get("choices") if isinstance(event.data, dict) else None
    calls = (choices[0].get("delta") or {}).get("tool_calls") if choices else None
    return bool(calls and calls[0].get("function", {}).get("arguments"))


@pytest.mark.parametrize(
    "cut",
    [Cut(after(_argument, 2)), Cut(after(_argument, 2), how="reset")],
    ids=["a clean end inside the call's arguments", "a connection reset"],
)
async def test_a_stream_cut_short_is_never_journaled_and_is_asked_again(
    tmp_path: Path, cut: Cut
) -> None:
    api = _chat_fake()
    seen: list[str] = []
    async with served(api) as server, httpx2.AsyncClient() as http:
        server.cut(cut)
        client = openai.AsyncOpenAI(
            api_key="fake", base_url=f"{server.url}/v1", http_client=http, max_retries=0
        )
        model = OpenAIChatModel(
            "gpt-5-mini",
            provider=OpenAIProvider(openai_client=client),
            # pydantic-ai takes a stream that ends without a finish reason for a whole answer
            # unless the profile says the API always sends one (OpenAI's does).
            profile=OpenAIModelProfile(openai_chat_streaming_requires_finish_reason=True),
        )
        app = TetherAgent(desk(model), tools={"lookup_order": {"policy": "rerun"}})
        async with watched(tmp_path, app, seen) as sup:
            await sup.start(RUN, PROMPT)
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    assert [s.cut for s in server.sent] == [cut, None]
    await check_asked_again(tmp_path, seen)
