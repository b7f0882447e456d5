"""A pydantic-ai agent's model errors are judged as an ``OpenAIModel``'s are.

Through pydantic-ai's ``OpenAIChatModel`` and the real ``openai`` SDK against the strict Chat
Completions fake: a 429 that says the account's quota is used up parks the run for a person at
once (waiting will not help), where a rate limit is asked again after the wait the server asked
for, and a bad request parks the run with what the API said.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import tether
from tether.integrations.pydantic_ai import TetherAgent
from tether.journal import ModelFailed, Parked
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..models import _chat_api as chat
from ..models._openai_fake import ApiError, api_error
from ..supervisor._helpers import WAIT, of_type, read_events

RUN = "run-errors"
PROMPT = "How much was order A-1?"
DONE = "Order A-1 came to 30."


@asynccontextmanager
async def supervised(root: Path, api: chat.ChatAPI) -> AsyncIterator[Supervisor]:
    async with api.client() as client:
        model = OpenAIChatModel("gpt-5-mini", provider=OpenAIProvider(openai_client=client))
        app: TetherAgent[Any] = TetherAgent(Agent(model, instructions="Look orders up."))
        async with Supervisor(
            tether.FileStore(root),
            model=app.model,
            tools=app.tools,
            sweep_interval=None,
            clock=VirtualClock(autojump_threshold=0),
        ) as sup:
            yield sup


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            api_error(
                429, "insufficient_quota", "You exceeded your quota.", code="insufficient_quota"
            ),
            "You exceeded your quota.",
        ),
        (
            api_error(400, "invalid_request_error", "Unknown parameter: 'foo'."),
            "Unknown parameter: 'foo'.",
        ),
    ],
    ids=["a quota used up (waiting will not help)", "a bad request"],
)
async def test_a_permanent_error_parks_the_run_for_a_person_at_once(
    tmp_path: Path, error: ApiError, said: str
) -> None:
    api = chat.ChatAPI(respond=lambda body: error)
    async with supervised(tmp_path, api) as sup:
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    assert len(api.bodies) == 1
    (parked,) = of_type(await read_events(tmp_path, RUN), Parked)
    assert f"status_code: {error.status}" in parked.reason
    assert said in parked.reason


async def test_a_rate_limit_is_asked_again_after_the_wait_the_server_asked_for(
    tmp_path: Path,
) -> None:
    limited = api_error(429, "requests", "Slow down.", code="rate_limit_exceeded", retry_after="7")
    asked: list[int] = []

    def respond(body: dict[str, Any]) -> ApiError | chat.Answer:
        asked.append(1)
        return limited if len(asked) == 1 else chat.answer(DONE)

    api = chat.ChatAPI(respond=respond)
    async with supervised(tmp_path, api) as sup:
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    (failed,) = of_type(await read_events(tmp_path, RUN), ModelFailed)
    assert failed.kind == "transient"
    assert failed.retry_at is not None
    assert abs(failed.retry_at - (failed.at + 7.0)) < 0.01
    assert len(api.bodies) == 2
