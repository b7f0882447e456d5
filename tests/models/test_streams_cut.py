"""A stream that ends early is never an answer: through the real SDKs, on a real socket.

Each adapter (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses) is driven by a
real ``Supervisor`` run against the strict fake of its API served over TCP (``_wire``), whose
first streamed answer is cut short the ways networks, proxies and restarts cut them: a clean
end of the response before the API's final event (``message_stop``, ``[DONE]``,
``response.completed``), a clean end inside a tool call's arguments, inside an event, inside a
character; a connection reset; a close in the middle of the chunked body; an ``error`` event
after part of the answer. Each time nothing of the partial answer is journaled (not its text,
not its call, not its usage), the failure is a transient model error asked again after a
backoff (no ``resumed`` record, no restart), and when the server answers whole the run goes
on from the whole answer: the email is sent once, with its whole body, and the run is done.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import tether
from tether.journal import ModelFailed, ModelResponse, Resumed, Usage
from tether.journal._records import FIRST_DRIVE
from tether.models import Model
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..supervisor._helpers import WAIT, of_type, read_events
from ..supervisor.test_claude_answers import mail_tools
from . import _chat_api as chat
from . import _messages_api as messages
from . import _messages_sse
from . import _responses_api as responses
from ._openai_fake import error_body
from ._wire import Cut, Event, after, before, halfway, served, within

RUN = "refund-42"
TO = "dana@example.com"
BODY = "Hi Dana, your refund of 42 EUR is on its way — it should land within 3 days."
SAID = "Sending Dana the email now —\u2028one moment."  # U+2028: JSON leaves it raw
OPENAI_MODEL = "gpt-5-mini"
CLAUDE = "claude-sonnet-4-6"


# -- the three APIs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Adapter:
    """One API: its fake with the run's script, the model on it, and how its streams look."""

    name: str
    fake: Callable[[], Any]
    model: Callable[[str, httpx2.AsyncClient, float], Model]
    """The model on the fake at a URL, its client giving up on a read after some seconds."""
    final: str
    """The type of the event that ends an answer."""
    argument: Callable[[Event], bool]
    """Whether an event carries a piece of a tool call's arguments."""
    error: Callable[[Sequence[Event]], bytes]
    """The API's own ``error`` event, to follow the events sent."""
    error_said: str
    """What the run's ``model_failed`` says of that error."""


def _claude_first() -> messages.Answer:
    call = messages.tool_use("toolu_01", "send_email", {"to": TO, "body": BODY})
    return messages.answer(messages.text(SAID), call)


def _claude_fake() -> messages.MessagesAPI:
    return messages.MessagesAPI(_claude_first(), _claude_first(), messages.answer("Sent."))


def _claude(url: str, http: httpx2.AsyncClient, timeout: float) -> Model:
    client = anthropic.AsyncAnthropic(
        api_key="test-key", base_url=url, http_client=http, timeout=timeout
    )
    return tether.AnthropicModel(CLAUDE, client=client, max_tokens=2048, stream=True)


def _claude_error(sent: Sequence[Event]) -> bytes:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return _messages_sse.encode(iter([("error", error)]))


def _chat_fake() -> chat.ChatAPI:
    first = chat.answer(SAID, chat.call("call_01", "send_email", {"to": TO, "body": BODY}))
    return chat.ChatAPI(first, first, chat.answer("Sent."))


def _openai(api: Any) -> Callable[[str, httpx2.AsyncClient, float], Model]:
    def build(url: str, http: httpx2.AsyncClient, timeout: float) -> Model:
        client = openai.AsyncOpenAI(
            api_key="test-key",
            base_url=f"{url}/v1",
            http_client=http,
            max_retries=0,
            timeout=timeout,
        )
        return tether.OpenAIModel(OPENAI_MODEL, client=client, api=api, stream=True)

    return build


def _chat_argument(event: Event) -> bool:
    choices = event.data.get("choices") if isinstance(event.data, dict) else None
    calls = (choices[0].get("delta") or {}).get("tool_calls") if choices else None
    return bool(calls and calls[0].get("function", {}).get("arguments"))


def _chat_error(sent: Sequence[Event]) -> bytes:
    error = error_body(
        "The server had an error while processing your request.", "server_error", None, None
    )
    return f"data: {json.dumps(error)}\n\n".encode()


def _responses_fake() -> responses.ResponsesAPI:
    first = responses.answer(
        responses.message(SAID),
        responses.function_call("call_01", "send_email", {"to": TO, "body": BODY}),
    )
    return responses.ResponsesAPI(first, first, responses.answer("Sent."))


def _responses_error(sent: Sequence[Event]) -> bytes:
    event = {
        "type": "error",
        "sequence_number": sent[-1].data["sequence_number"] + 1,
        "code": "server_error",
        "message": "An error occurred while processing your request.",
        "param": None,
    }
    return f"event: error\ndata: {json.dumps(event)}\n\n".encode()


ADAPTERS = {
    "messages": Adapter(
        "messages",
        _claude_fake,
        _claude,
        final="message_stop",
        argument=lambda e: (
            e.type == "content_block_delta" and bool(e.data["delta"].get("partial_json"))
        ),
        error=_claude_error,
        error_said="an error in the stream overloaded_error: Overloaded",
    ),
    "chat": Adapter(
        "chat",
        _chat_fake,
        _openai("chat"),
        final="[DONE]",
        argument=_chat_argument,
        error=_chat_error,
        error_said="the stream broke off: server_error: The server had an error",
    ),
    "responses": Adapter(
        "responses",
        _responses_fake,
        _openai("responses"),
        final="response.completed",
        argument=lambda e: e.type == "response.function_call_arguments.delta",
        error=_responses_error,
        error_said="the stream broke off: server_error: An error occurred",
    ),
}


# -- the cuts ---------------------------------------------------------------------------------

ENDED = "the stream ended before"
DROPPED = "connection failed: "


@dataclass(frozen=True)
class Case:
    """One way of cutting a stream short, and what the run's ``model_failed`` says of it."""

    cut: Callable[[Adapter], Cut]
    said: Callable[[Adapter], str]
    timeout: float = WAIT
    """How long the client waits for the next bytes of an answer."""


CASES: dict[str, Case] = {
    "a clean end before the final event": Case(lambda a: Cut(before(a.final)), lambda a: ENDED),
    "a clean end inside the call's arguments": Case(
        lambda a: Cut(after(a.argument, 3)), lambda a: ENDED
    ),
    "a clean end inside an event": Case(
        lambda a: Cut(after(a.argument, 2), inside=halfway), lambda a: ENDED
    ),
    "a clean end inside a character": Case(
        lambda a: Cut(before_text("—"), inside=within("—")),
        # The SDKs' own decoders read each event's bytes strictly; the chat stream is read
        # as text, which drops the unfinished event the character was in.
        lambda a: ENDED if a.name == "chat" else "the stream ended inside a character",
    ),
    "a connection reset": Case(lambda a: Cut(after(a.argument, 2), how="reset"), lambda a: DROPPED),
    "a close inside the chunked body": Case(
        lambda a: Cut(after(a.argument, 2), how="close"),
        lambda a: DROPPED + "RemoteProtocolError",
    ),
    "a stall past the client's read timeout": Case(
        lambda a: Cut(after(a.argument, 2), how="stall"),
        lambda a: "request timed out",
        timeout=1.0,  # long enough for a loaded machine to answer whole in time
    ),
    "an error event after part of the answer": Case(
        lambda a: Cut(after(a.argument, 2), how="error", error=a.error), lambda a: a.error_said
    ),
}


def before_text(text: str) -> Callable[[Sequence[Event]], int]:
    """At the first event whose bytes hold ``text``."""

    def pick(events: Sequence[Event]) -> int:
        return next(i for i, e in enumerate(events) if text.encode() in e.raw)

    return pick


# Cuts only one API has: Messages sends the stop reason and the final usage in message_delta,
# before message_stop; Chat Completions sends the usage in a chunk after the finish reason.
EXTRA: list[tuple[str, str, Case]] = [
    (
        "messages",
        "a clean end before message_delta",
        Case(lambda a: Cut(before("message_delta")), lambda a: ENDED),
    ),
    (
        "chat",
        "a clean end after the finish reason, before the usage",
        Case(lambda a: Cut(after(lambda e: _finish_reason(e) is not None)), lambda a: ENDED),
    ),
]


def _finish_reason(event: Event) -> str | None:
    choices = event.data.get("choices") if isinstance(event.data, dict) else None
    return choices[0].get("finish_reason") if choices else None


PARAMS = [
    pytest.param(adapter, case, id=f"{adapter}: {name}")
    for adapter in ADAPTERS
    for name, case in CASES.items()
] + [pytest.param(adapter, case, id=f"{adapter}: {name}") for adapter, name, case in EXTRA]


# -- the runs ---------------------------------------------------------------------------------


@asynccontextmanager
async def supervised(
    root: Path, adapter: Adapter, *cuts: Cut, timeout: float = WAIT
) -> AsyncIterator[tuple[Supervisor, Any, Any, list[str]]]:
    api = adapter.fake()
    sent: list[str] = []
    async with served(api) as server, httpx2.AsyncClient() as http:
        server.cut(*cuts)
        model = adapter.model(server.url, http, timeout)
        store = tether.FileStore(root)
        async with Supervisor(
            store, model=model, tools=mail_tools(sent), clock=VirtualClock(autojump_threshold=0)
        ) as sup:
            yield sup, api, server, sent


@pytest.mark.parametrize(("adapter", "case"), PARAMS)
async def test_a_stream_cut_short_is_asked_again_and_nothing_of_it_is_journaled(
    tmp_path: Path, adapter: str, case: Case
) -> None:
    api_of = ADAPTERS[adapter]
    cut = case.cut(api_of)
    async with supervised(tmp_path, api_of, cut, timeout=case.timeout) as (sup, api, server, sent):
        await sup.start(RUN, "Tell Dana her refund is on its way.")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)
    api.assert_all_answered()
    assert [s.cut for s in server.sent] == [cut, None, None]
    assert api_of.final not in [e.type for e in server.sent[0].events]

    events = await read_events(tmp_path, RUN)
    (failed,) = of_type(events, ModelFailed)
    assert failed.kind == "transient"
    assert case.said(api_of) in failed.error
    assert failed.usage == Usage()  # the partial answer's tokens are a guess: none counted
    assert failed.retry_at is not None
    assert failed.retry_at - failed.at >= 0.5  # a backoff: the first wait is 1 s +- 50 %
    assert [r.cause for r in of_type(events, Resumed)] in ([], [FIRST_DRIVE])
    assert view.restarts == 0

    first, last = of_type(events, ModelResponse)
    assert first.seq > failed.seq
    blocks = first.message["content"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[0]["text"] == SAID
    assert blocks[1]["input"] == {"to": TO, "body": BODY}
    assert first.stop_reason == "tool_use"
    assert first.usage.output_tokens > 1  # the whole answer's count, not a first event's
    assert last.message["content"][0]["text"] == "Sent."
    assert sent == [BODY]


async def test_streams_cut_short_again_and_again_never_crash_the_run(tmp_path: Path) -> None:
    """Five drops in a row (more than the crash-loop limit of four) are five transient errors,
    each with a longer backoff, and the run still finishes: a stream that drops is the
    network's fault, never counted as the run's crash."""
    adapter = ADAPTERS["messages"]
    drops = [Cut(after(adapter.argument, 1 + n), how="reset") for n in range(5)]
    api = messages.MessagesAPI(*[_claude_first()] * 6, messages.answer("Sent."))
    sent: list[str] = []
    async with served(api) as server, httpx2.AsyncClient() as http:
        server.cut(*drops)
        model = adapter.model(server.url, http, WAIT)
        async with Supervisor(
            tether.FileStore(tmp_path),
            model=model,
            tools=mail_tools(sent),
            clock=VirtualClock(autojump_threshold=0),
        ) as sup:
            await sup.start(RUN, "Tell Dana her refund is on its way.")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
            view = await sup.inspect(RUN)
    api.assert_all_answered()
    events = await read_events(tmp_path, RUN)
    failures = of_type(events, ModelFailed)
    assert [f.kind for f in failures] == ["transient"] * 5
    assert all(f.error.startswith(DROPPED) for f in failures)
    assert view.restarts == 0
    assert [r.cause for r in of_type(events, Resumed)] in ([], [FIRST_DRIVE])
    assert sent == [BODY]
    assert server.connections >= 6
