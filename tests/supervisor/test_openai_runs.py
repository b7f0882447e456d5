"""Whole runs through the Supervisor on ``OpenAIModel``: the real ``openai`` SDK against the
strict fakes of Chat Completions and the Responses API.

Each fake refuses what the real API refuses (tool messages and call ids that do not pair up,
reasoning items sent back without the item that followed them, ...), so a run that finishes
here sent a valid continuation at every turn: renamed call ids included.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx2
import openai
import pytest

import tether
from tether.journal import ModelFailed, ModelResponse, Parked, ToolResult, ToolStarted
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..models import _chat_api as chat
from ..models import _responses_api as responses
from ..models._openai_fake import DEFAULT_BASE_URL, FakeAPI, api_error
from ._helpers import WAIT, of_type, read_events, result_of

MODEL = "gpt-5-mini"
RUN = "run-1"
REPO = pathlib.Path(__file__).resolve().parents[2]


def refund_tools(refunds: list[tuple[str, str]]) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def refund(order: str, ctx: tether.ToolContext) -> str:
        """Refund an order."""
        refunds.append((order, ctx.idempotency_key))
        return f"refunded {order}"

    return tools


@asynccontextmanager
async def openai_model(api: FakeAPI[Any], **options: Any) -> AsyncIterator[tether.OpenAIModel]:
    kind: Literal["chat", "responses"] = "chat" if isinstance(api, chat.ChatAPI) else "responses"
    name = options.pop("name", MODEL)
    async with api.client(base_url=options.pop("base_url", DEFAULT_BASE_URL)) as client:
        yield tether.OpenAIModel(name, client=client, api=kind, **options)


async def drive(
    root: pathlib.Path, api: FakeAPI[Any], tools: tether.ToolRegistry, **options: Any
) -> Any:
    on_text = options.pop("on_text", None)
    async with (
        openai_model(api, **options) as model,
        Supervisor(
            tether.FileStore(root),
            model=model,
            tools=tools,
            clock=VirtualClock(autojump_threshold=0),
            on_text=on_text,
        ) as sup,
    ):
        with contextlib.suppress(tether.RunExistsError):  # resumed
            await sup.start(RUN, "Refund orders o-1 and o-2.", system="You are Kitebase billing.")
        await sup.wait(RUN, timeout=WAIT)
        return await sup.inspect(RUN)


def per_turn(kind: str) -> FakeAPI[Any]:
    """A server that numbers its calls per turn: ``call_0`` every time."""
    if kind == "chat":
        return chat.ChatAPI(
            chat.answer(chat.call("call_0", "refund", {"order": "o-1"})),
            chat.answer(chat.call("call_0", "refund", {"order": "o-2"})),
            chat.answer("Both refunded."),
        )
    return responses.ResponsesAPI(
        responses.answer(
            responses.reasoning("First o-1."),
            responses.function_call("call_0", "refund", {"order": "o-1"}),
        ),
        responses.answer(
            responses.reasoning("Now o-2."),
            responses.function_call("call_0", "refund", {"order": "o-2"}),
        ),
        responses.answer("Both refunded."),
    )


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_a_server_that_says_call_0_every_turn_gets_the_renamed_ids_back(
    tmp_path: pathlib.Path, kind: str
) -> None:
    refunds: list[tuple[str, str]] = []
    api = per_turn(kind)
    view = await drive(tmp_path, api, refund_tools(refunds))
    api.assert_all_answered()
    assert api.rejections == []
    assert view.status is RunStatus.DONE, view.reason
    assert view.final_text == "Both refunded."
    # Two calls, two keys: the second call_0 was renamed before it was journaled.
    assert refunds == [("o-1", f"{RUN}:call_0"), ("o-2", f"{RUN}:call_0-t2")]
    last = api.bodies[-1]
    if kind == "chat":
        sent = last["messages"]
        assert sent[4]["tool_calls"][0]["id"] == "call_0-t2"
        assert sent[5] == {"role": "tool", "tool_call_id": "call_0-t2", "content": "refunded o-2"}
    else:
        calls = [i for i in last["input"] if i.get("type") == "function_call"]
        outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
        assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs]
        assert [c["call_id"] for c in calls] == ["call_0", "call_0-t2"]
        # The item ids are the server's own, kept: each call still pairs with its reasoning.
        assert all(c["id"].startswith("fc_") for c in calls)


def parallel(kind: str, ids: tuple[str, str]) -> FakeAPI[Any]:
    """Two turns of two calls at once, each turn's calls named ``ids``."""
    orders = [("o-1", "o-2"), ("o-3", "o-4")]
    if kind == "chat":
        return chat.ChatAPI(
            *(
                chat.answer(
                    *(chat.call(i, "refund", {"order": o}) for i, o in zip(ids, pair, strict=True))
                )
                for pair in orders
            ),
            chat.answer("Done."),
        )
    return responses.ResponsesAPI(
        *(
            responses.answer(
                *(
                    responses.function_call(i, "refund", {"order": o})
                    for i, o in zip(ids, pair, strict=True)
                )
            )
            for pair in orders
        ),
        responses.answer("Done."),
    )


@pytest.mark.parametrize("kind", ["chat", "responses"])
@pytest.mark.parametrize(
    ("ids", "journaled"),
    [
        (("call_a", "call_b"), ["call_a", "call_b", "call_a-t2", "call_b-t2"]),
        # A server that names every call of a turn call_0: each still gets its own key.
        (("call_0", "call_0"), ["call_0", "call_0-2", "call_0-t2", "call_0-2-t2"]),
    ],
    ids=["distinct", "repeated"],
)
async def test_parallel_calls_run_and_answer_together(
    tmp_path: pathlib.Path, kind: str, ids: tuple[str, str], journaled: list[str]
) -> None:
    refunds: list[tuple[str, str]] = []
    api = parallel(kind, ids)
    view = await drive(tmp_path, api, refund_tools(refunds), parallel_tool_calls=True)
    api.assert_all_answered()
    assert api.rejections == []
    assert view.status is RunStatus.DONE, view.reason
    orders = ["o-1", "o-2", "o-3", "o-4"]
    assert sorted(refunds) == [(o, f"{RUN}:{i}") for o, i in zip(orders, journaled, strict=True)]
    if kind == "chat":
        answered = [m["tool_call_id"] for m in api.bodies[-1]["messages"] if m["role"] == "tool"]
    else:
        answered = [
            i["call_id"] for i in api.bodies[-1]["input"] if i.get("type") == "function_call_output"
        ]
    assert answered == journaled
    events = await read_events(tmp_path, RUN)
    assert [s.call_id for s in of_type(events, ToolStarted)] == journaled


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_unreadable_arguments_are_an_error_the_model_reads_and_nothing_runs(
    tmp_path: pathlib.Path, kind: str
) -> None:
    refunds: list[tuple[str, str]] = []
    broken = '{"order": "o-1"'
    api: FakeAPI[Any]
    if kind == "chat":
        api = chat.ChatAPI(
            chat.answer(chat.call("call_1", "refund", broken)),
            chat.answer(chat.call("call_2", "refund", {"order": "o-1"})),
            chat.answer("Refunded."),
        )
    else:
        api = responses.ResponsesAPI(
            responses.answer(responses.function_call("call_1", "refund", broken)),
            responses.answer(responses.function_call("call_2", "refund", {"order": "o-1"})),
            responses.answer("Refunded."),
        )
    view = await drive(tmp_path, api, refund_tools(refunds))
    api.assert_all_answered()
    assert view.status is RunStatus.DONE, view.reason
    assert refunds == [("o-1", f"{RUN}:call_2")]  # once, from the call sent again
    events = await read_events(tmp_path, RUN)
    bad = result_of(events, "call_1")
    assert not bad.ok
    assert bad.content.startswith(
        "not run: the arguments of this call (refund) could not be read: they are not valid "
        "JSON (Expecting ',' delimiter"
    )
    assert broken in bad.content  # the model is shown what it wrote
    assert [s.call_id for s in of_type(events, ToolStarted)] == ["call_2"]
    assert of_type(events, ModelFailed) == []  # an answer, not a malformed reply


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_a_call_cut_off_by_length_never_runs(tmp_path: pathlib.Path, kind: str) -> None:
    refunds: list[tuple[str, str]] = []
    api: FakeAPI[Any]
    if kind == "chat":
        api = chat.ChatAPI(
            chat.answer(chat.call("call_1", "refund", '{"order": "o-'), finish_reason="length"),
            chat.answer(chat.call("call_2", "refund", {"order": "o-1"})),
            chat.answer("Refunded."),
        )
        limit = {"max_completion_tokens": 400}
    else:
        api = responses.ResponsesAPI(
            responses.answer(
                responses.function_call("call_1", "refund", '{"order": "o-'),
                incomplete="max_output_tokens",
            ),
            responses.answer(responses.function_call("call_2", "refund", {"order": "o-1"})),
            responses.answer("Refunded."),
        )
        limit = {"max_output_tokens": 400}
    view = await drive(tmp_path, api, refund_tools(refunds), **limit)
    api.assert_all_answered()
    assert view.status is RunStatus.DONE
    assert refunds == [("o-1", f"{RUN}:call_2")]
    events = await read_events(tmp_path, RUN)
    assert of_type(events, ModelResponse)[0].stop_reason == "max_tokens"
    assert "cut off by max_tokens" in result_of(events, "call_1").content


_LONG_REFUSAL = "I can't help with that.\n" + "Really. " * 40


@pytest.mark.parametrize(
    ("scripted", "reason"),
    [
        (
            chat.ChatAPI(chat.answer(refusal="I can't help with refunds.")),
            'the model refused to continue: "I can\'t help with refunds."',
        ),
        (
            chat.ChatAPI(chat.answer("", finish_reason="content_filter")),
            "the provider's content filter stopped the answer (finish_reason content_filter)",
        ),
        (
            responses.ResponsesAPI(responses.answer(responses.message(responses.Refusal("No.")))),
            'the model refused to continue: "No."',
        ),
        (
            responses.ResponsesAPI(responses.answer("It was", incomplete="content_filter")),
            "the provider's content filter stopped the answer (incomplete_reason content_filter)",
        ),
        (
            chat.ChatAPI(chat.answer(refusal=_LONG_REFUSAL)),
            "the model refused to continue: "
            + json.dumps((" ".join(_LONG_REFUSAL.split()))[:199] + "…", ensure_ascii=False),
        ),
    ],
    ids=[
        "chat-refusal",
        "chat-content-filter",
        "responses-refusal",
        "responses-content-filter",
        "long-refusal",
    ],
)
async def test_a_refusal_fails_the_run_saying_why_in_the_models_words(
    tmp_path: pathlib.Path, scripted: FakeAPI[Any], reason: str
) -> None:
    view = await drive(tmp_path, scripted, refund_tools([]))
    assert view.status is RunStatus.FAILED
    assert view.reason == reason


_CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}


def _sse(*choices: dict[str, Any]) -> bytes:
    events = [json.dumps(_CHUNK | {"choices": [c]}).encode() for c in choices]
    return b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("answer", "wrong"),
    [
        (
            httpx2.Response(
                200,
                json={
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"content": "Hi."}}],
                    "usage": "lots",
                },
            ),
            "usage must be an object, not a string ('lots')",
        ),
        (
            httpx2.Response(
                200,
                content=_sse(
                    {"index": 0, "delta": {"tool_calls": [{"index": "abc", "id": "c"}]}},
                    {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
                ),
                headers={"content-type": "text/event-stream"},
            ),
            "streamed chunk 1: choices.0.delta.tool_calls.0.index must be an integer, not a "
            "string ('abc')",
        ),
    ],
    ids=["usage", "streamed-index"],
)
async def test_an_answer_of_the_wrong_shape_is_asked_again_then_parks_naming_the_field(
    tmp_path: pathlib.Path, answer: httpx2.Response, wrong: str
) -> None:
    asked: list[httpx2.Request] = []

    def serve(request: httpx2.Request) -> httpx2.Response:
        asked.append(request)
        return answer

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(serve)) as http,
        openai.AsyncOpenAI(api_key="k", http_client=http, max_retries=0) as client,
        Supervisor(
            tether.FileStore(tmp_path),
            model=tether.OpenAIModel(MODEL, client=client, stream=b"[DONE]" in answer.content),
            clock=VirtualClock(autojump_threshold=0),
        ) as sup,
    ):
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert view.reason == f"the model's answer was malformed 3 times in a row; last: {wrong}"
    assert len(asked) == 3
    events = await read_events(tmp_path, RUN)
    assert [f.kind for f in of_type(events, ModelFailed)] == ["malformed"] * 3
    assert [p.cause for p in of_type(events, Parked)] == ["model"]


async def test_the_answers_id_is_journaled_with_it(tmp_path: pathlib.Path) -> None:
    api = chat.ChatAPI(
        chat.answer(chat.call("call_1", "refund", {"order": "o-1"})), chat.answer("Done.")
    )
    view = await drive(tmp_path, api, refund_tools([]))
    assert view.status is RunStatus.DONE, view.reason
    events = await read_events(tmp_path, RUN)
    ids = [r.response_id for r in of_type(events, ModelResponse)]
    assert ids == ["chatcmpl-fake000001", "chatcmpl-fake000002"]


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_rate_limits_and_server_errors_are_asked_again_a_400_parks(
    tmp_path: pathlib.Path, kind: str
) -> None:
    errors = [
        api_error(
            429, "requests", "Rate limit reached", code="rate_limit_exceeded", retry_after="7"
        ),
        api_error(503, "server_error", "The server is overloaded"),
        api_error(400, "invalid_request_error", "Invalid 'messages[1]'"),
    ]
    api: FakeAPI[Any]
    if kind == "chat":
        api = chat.ChatAPI(*errors, chat.answer("Hello."))
    else:
        api = responses.ResponsesAPI(*errors, responses.answer("Hello."))
    clock = VirtualClock(autojump_threshold=0)
    async with (
        openai_model(api) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, clock=clock, jitter=lambda: 0.5) as sup,
    ):
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
        assert view.reason == (
            f"calling model {MODEL!r} failed for good: HTTP 400 invalid_request_error: "
            "Invalid 'messages[1]' (request-id req_fake000003)"
        )
        await sup.retry(RUN, by="ops", note="fixed")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    api.assert_all_answered()
    events = await read_events(tmp_path, RUN)
    failed = of_type(events, ModelFailed)
    assert [f.kind for f in failed] == ["transient", "transient"]
    assert failed[0].error.startswith("HTTP 429 rate_limit_exceeded: Rate limit reached")
    (parked,) = of_type(events, Parked)  # the third request: each went out at its retry time
    assert failed[0].retry_at == failed[0].at + 7.0 == failed[1].at
    assert failed[1].retry_at == failed[1].at + 2.0 == parked.at


@pytest.mark.parametrize(
    ("resumed_on", "said"),
    [
        (
            {"base_url": "http://localhost:11434/v1"},
            ["model parameters changed", "'host': 'api.openai.com'", "'host': 'localhost:11434'"],
        ),
        ({"name": "gpt-5"}, ["pinned model 'gpt-5-mini' is not available", "'gpt-5'"]),
        ({"api": "responses"}, ["model parameters changed", "'api': 'chat'", "'api': 'responses'"]),
        ({"temperature": 0.2}, ["model parameters changed", "'temperature': 0.2"]),
    ],
    ids=["another-server", "another-model", "another-api", "other-params"],
)
async def test_a_run_resumed_on_another_model_or_endpoint_stops_for_a_person(
    tmp_path: pathlib.Path, resumed_on: dict[str, Any], said: list[str]
) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key", approval=True)
    async def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    first = chat.ChatAPI(chat.answer(chat.call("call_1", "refund", {"order": "o-1"})))
    view = await drive(tmp_path, first, tools)
    assert view.status is RunStatus.WAITING_FOR_APPROVAL
    options = dict(resumed_on)
    other: FakeAPI[Any] = (
        responses.ResponsesAPI() if options.pop("api", "chat") == "responses" else chat.ChatAPI()
    )
    async with (
        openai_model(other, **options) as model,
        Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup,
    ):
        await sup.decide(RUN, "call_1", approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    for text in said:
        assert text in view.reason
    assert other.calls == 0


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_text_streams_to_on_text_and_the_answer_is_journaled_once(
    tmp_path: pathlib.Path, kind: str
) -> None:
    usage: dict[str, Any]
    api: FakeAPI[Any]
    if kind == "chat":
        usage = {"completion_tokens_details": {"reasoning_tokens": 64}}
        api = chat.ChatAPI(chat.answer("Nothing to refund today.", usage=usage))
    else:
        usage = {"output_tokens_details": {"reasoning_tokens": 64}}
        api = responses.ResponsesAPI(responses.answer("Nothing to refund today.", usage=usage))
    pieces: list[tuple[str, str]] = []
    view = await drive(tmp_path, api, refund_tools([]), on_text=lambda r, t: pieces.append((r, t)))
    api.assert_all_answered()
    assert view.status is RunStatus.DONE
    assert api.exchanges[0].stream
    assert len(pieces) > 1
    assert "".join(t for _, t in pieces) == "Nothing to refund today."
    events = await read_events(tmp_path, RUN)
    [answer] = of_type(events, ModelResponse)
    assert answer.usage.reasoning_tokens == 64
    show = subprocess.run(
        [sys.executable, "-m", "tether.cli", "show", RUN, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=60,
    ).stdout
    assert "reasoning: 64 tokens" in show


@pytest.mark.slow
def test_a_run_parked_for_approval_resumes_in_a_new_process_after_a_kill(
    tmp_path: pathlib.Path,
) -> None:
    """Process 1 parks for approval and is killed with SIGKILL while parked; the approval is
    recorded from the command line; process 2, with a fresh fake (the same secret, as the
    real API's key is the same for every process), sends back the reasoning items and the
    renamed call ids of process 1's journal, and every request passes the fake's checks."""
    child = [sys.executable, "-m", "tests.supervisor._openai_child", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    errors = tmp_path / "first.err"
    with (
        errors.open("w") as err,
        subprocess.Popen(
            child, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        ) as first,
    ):
        try:
            assert first.stdout is not None
            line = first.stdout.readline()
            assert line.startswith("parked "), errors.read_text()
            pending = json.loads(line.removeprefix("parked "))
            assert pending == ["call_0-t2"]  # the server's second call_0, renamed
            first.send_signal(signal.SIGKILL)  # parked: nothing in flight, nothing held
            assert first.wait(timeout=60) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
    approve = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "approve",
            RUN,
            "call_0-t2",
            "--root",
            str(tmp_path / "store"),
            "--by",
            "priya",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert approve.returncode == 0, approve.stderr
    resumed = subprocess.run(child, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-1] == (
        "done refunds=['o-1 run-1:call_0', 'o-2 run-1:call_0-t2'] requests=1 rejections=0"
    )
    events = anyio.run(read_events, tmp_path / "store", RUN)
    assert len(of_type(events, ToolResult)) == 2


async def test_a_worker_without_credentials_says_so_once_at_start_and_parks_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.ERROR, logger="tether.supervisor")
    async with (
        tether.OpenAIModel(MODEL) as model,
        Supervisor(tether.FileStore(tmp_path), model=model) as sup,
    ):
        loud = [r for r in caplog.records if "cannot answer" in r.getMessage()]
        assert len(loud) == 1  # once, at start, before any run asked
        assert "no OpenAI credentials" in loud[0].getMessage()
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert "no OpenAI credentials: set OPENAI_API_KEY" in view.reason
    assert view.restarts == 0
