"""A model that is overloaded, refuses requests, has no credentials or answers nonsense.

None of it is the run's fault, so none of it may end the run as ``failed`` or spend its
crash-loop budget: transient errors are asked again within the run, honouring the server's
``retry-after`` (each failure journaled); permanent ones park the run as ``needs_attention``
with the error until a person sends it on (``Supervisor.retry``, ``tether retry``). The real
SDK client is used; only its HTTP transport is replaced.
"""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import anyio
import httpx2
import pytest

import tether
from tether.journal import ModelFailed, ModelResponse, Parked, Resumed, Retried
from tether.models import Message, ModelReply, SystemPrompt, ToolDefinition
from tether.operate import summarize
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ._helpers import WAIT, of_type, read_events

MODEL = "claude-haiku-4-5"
RUN = "run-1"
REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-m", "tether.cli")


def answer(text: str) -> httpx2.Response:
    body = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    return httpx2.Response(200, json=body)


def not_json() -> httpx2.Response:
    """A 200 whose body is not JSON (a proxy's error page)."""
    return httpx2.Response(
        200, content=b"<html>upstream error</html>", headers={"content-type": "application/json"}
    )


def api_error(status: int, error_type: str, text: str, **headers: str) -> httpx2.Response:
    body = {"type": "error", "error": {"type": error_type, "message": text}}
    return httpx2.Response(status, json=body, headers=headers)


class FakeAPI:
    """Answers from a queue; counts the requests it was sent."""

    def __init__(self, *responses: httpx2.Response) -> None:
        self.responses = list(responses)
        self.requests = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        return self.responses.pop(0)


@asynccontextmanager
async def claude(api: FakeAPI) -> AsyncIterator[tether.AnthropicModel]:
    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(api)) as http,
        anthropic.AsyncAnthropic(api_key="k", http_client=http, max_retries=0) as client,
    ):
        yield tether.AnthropicModel(MODEL, client=client, max_tokens=64)


async def _done_on_a_virtual_clock(path: pathlib.Path, api: FakeAPI) -> tether.RunView:
    """Run ``RUN`` on Claude behind ``api`` to ``done``, on a virtual clock (each retry at its
    exact time), with no jitter; the run as it ended."""
    clock = VirtualClock(autojump_threshold=0)
    async with (
        claude(api) as model,
        Supervisor(tether.FileStore(path), model=model, clock=clock, jitter=lambda: 0.5) as sup,
    ):
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        return await sup.inspect(RUN)


async def test_an_overloaded_model_is_asked_again_after_the_wait_it_named(
    tmp_path: pathlib.Path,
) -> None:
    api = FakeAPI(
        api_error(529, "overloaded_error", "Overloaded", **{"retry-after": "7"}),
        api_error(529, "overloaded_error", "Overloaded"),
        answer("Here you are."),
    )
    view = await _done_on_a_virtual_clock(tmp_path, api)

    assert view.final_text == "Here you are."
    assert api.requests == 3
    events = await read_events(tmp_path, RUN)
    failed = of_type(events, ModelFailed)
    assert [f.kind for f in failed] == ["transient", "transient"]
    assert failed[0].error == "HTTP 529 overloaded_error: Overloaded"
    # The server named 7 s; the second time it named nothing: the runtime's own backoff
    # (2 s on the second failure, jitter 0.5 meaning none). Each request went out at its
    # retry time, not a moment before (the clock is virtual: the times are exact).
    (response,) = of_type(events, ModelResponse)
    assert failed[0].retry_at == failed[0].at + 7.0 == failed[1].at
    assert failed[1].retry_at == failed[1].at + 2.0 == response.at
    assert of_type(events, Resumed) == []  # asked again within the run: no restart
    assert view.model_calls == 1
    # Meanwhile the listings said so (``tether runs``, the console): an outage is visible.
    waiting = summarize(RUN, events[: events.index(failed[1]) + 1], now=failed[1].at)
    assert waiting.retrying.startswith(
        "the model call failed 2 times, last: HTTP 529 overloaded_error: Overloaded; asked "
        "again at "
    )
    assert waiting.retrying in waiting.detail()
    assert summarize(RUN, events).retrying == ""


async def test_a_rejected_request_parks_the_run_until_a_person_retries_it(
    tmp_path: pathlib.Path,
) -> None:
    api = FakeAPI(
        api_error(400, "invalid_request_error", "messages.0: image too large"),
        answer("Done after the fix."),
    )
    async with (
        claude(api) as model,
        Supervisor(tether.FileStore(tmp_path), model=model) as sup,
    ):
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
        assert api.requests == 1  # not sent again: asking again cannot help
        assert view.reason == (
            f"calling model {MODEL!r} failed for good: HTTP 400 invalid_request_error: "
            "messages.0: image too large"
        )
        assert view.restarts == 0
        await sup.retry(RUN, by="ops", note="image resized")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect(RUN)

    assert view.final_text == "Done after the fix."
    events = await read_events(tmp_path, RUN)
    (parked,) = of_type(events, Parked)
    assert parked.cause == "model"
    (retried,) = of_type(events, Retried)
    assert retried.seq > parked.seq


def _forget_credentials(monkeypatch: pytest.MonkeyPatch, home: pathlib.Path) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_FEDERATION_RULE_ID",
        "ANTHROPIC_ORGANIZATION_ID",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))


async def test_a_worker_without_credentials_says_so_and_parks_runs_until_retried(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _forget_credentials(monkeypatch, tmp_path / "home")
    root = tmp_path / "store"
    caplog.set_level(logging.ERROR, logger="tether.supervisor")
    async with (
        tether.AnthropicModel(MODEL, max_tokens=64) as model,
        Supervisor(tether.FileStore(root), model=model) as sup,
    ):
        loud = [r for r in caplog.records if "cannot answer" in r.getMessage()]
        assert len(loud) == 1  # once, at start, before any run asked
        assert "no Anthropic credentials" in loud[0].getMessage()
        for n in range(3):
            await sup.start(f"run-{n}", "hi")
        for n in range(3):
            assert await sup.wait(f"run-{n}", timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect("run-0")
    assert "no Anthropic credentials: set ANTHROPIC_API_KEY" in view.reason
    assert view.restarts == 0

    # The operator fixes the key and sends the runs on from the command line.
    for n in range(3):
        retry = subprocess.run(
            [*CLI, "retry", "--root", str(root), f"run-{n}", "--by", "ops", "--note", "key set"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
            timeout=60,
        )
        assert retry.returncode == 0, retry.stderr
        assert f"recorded: retry of run run-{n} by ops" in retry.stdout
        assert "no Anthropic credentials" in retry.stdout  # what it had stopped with
    api = FakeAPI(*[answer("Hello.") for _ in range(3)])
    async with claude(api) as model, Supervisor(tether.FileStore(root), model=model) as sup:
        for n in range(3):
            assert await sup.wait(f"run-{n}", timeout=WAIT) is RunStatus.DONE
    assert api.requests == 3


def test_retry_refuses_a_run_with_nothing_to_retry(tmp_path: pathlib.Path) -> None:
    async def make() -> None:
        model = tether.ScriptedModel(["fine"])
        async with Supervisor(tether.FileStore(tmp_path), model=model) as sup:
            await sup.start(RUN, "hi")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE

    anyio.run(make)
    retry = subprocess.run(
        [*CLI, "retry", "--root", str(tmp_path), RUN, "--by", "x"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert retry.returncode == 1
    assert "run already finished (done)" in retry.stderr


class Babbling:
    """A model whose answers never validate (a tool call without an id)."""

    name = "babbling"
    params: dict[str, Any] = {}  # noqa: RUF012 - a fixed, empty parameter set

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        self.calls += 1
        blocks: Any = [{"type": "tool_use", "name": "x", "input": {}}]
        return ModelReply(content=tether.models.check_reply_blocks(self.name, blocks))


async def test_malformed_answers_are_asked_again_a_few_times_then_park(
    tmp_path: pathlib.Path,
) -> None:
    model = Babbling()
    clock = VirtualClock(autojump_threshold=0)
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, clock=clock, jitter=lambda: 0.5
    ) as sup:
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert model.calls == 3
    assert "malformed 3 times in a row" in view.reason
    assert "'id' must be a string" in view.reason
    events = await read_events(tmp_path, RUN)
    failed = of_type(events, ModelFailed)
    assert [f.kind for f in failed] == ["malformed"] * 3
    # Asked again after the backoff of a transient failure (1 s, then 2 s: the clock is
    # virtual), not at once: a proxy's error page for a moment does not park the run.
    assert failed[0].retry_at == failed[0].at + 1.0 == failed[1].at
    assert failed[1].retry_at == failed[1].at + 2.0 == failed[2].at
    assert failed[2].retry_at is None  # the third parks it
    assert of_type(events, ModelResponse) == []
    assert of_type(events, Resumed) == []


async def test_transient_failures_before_a_malformed_answer_are_not_counted_as_malformed(
    tmp_path: pathlib.Path,
) -> None:
    """Two 529s, then one answer that is not JSON, then a good one: one malformed answer is
    not three in a row, and the run finishes."""
    api = FakeAPI(
        api_error(529, "overloaded_error", "Overloaded"),
        api_error(529, "overloaded_error", "Overloaded"),
        not_json(),
        answer("Here you are."),
    )
    await _done_on_a_virtual_clock(tmp_path, api)
    events = await read_events(tmp_path, RUN)
    assert [f.kind for f in of_type(events, ModelFailed)] == ["transient", "transient", "malformed"]
    assert of_type(events, Parked) == []
