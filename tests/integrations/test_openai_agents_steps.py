"""An Agents SDK run's steps on tether: calls whose arguments cannot be read, the model's
errors, the usage journaled.

The agents' model is the SDK's ``OpenAIResponsesModel`` on the real ``openai`` SDK, reaching
the strict fake of the Responses API (``tests/models/_responses_api``) through a mock
transport. A run under ``TetherRunner`` must end where the plain SDK's ``Runner.run`` ends: a
call the model wrote with no arguments runs its tool; a call whose arguments are no JSON
object runs nothing, and its error goes back to the model, which is asked again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    Model,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Tool,
    function_tool,
)

import tether
from tether.integrations.openai_agents import TetherRunner
from tether.journal import ModelFailed, ModelResponse, Parked, ToolResult, ToolStarted, Usage
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from ..models import _chat_api as chat
from ..models import _responses_api as responses
from ..models._openai_fake import ApiError, api_error
from ..supervisor._helpers import WAIT, of_type, read_events

RUN = "run-steps"
PROMPT = "How much was order A-1?"
DONE = "Order A-1 came to 30.0 EUR."


def outputs(body: dict[str, Any]) -> list[str]:
    """The tool outputs a request sends back to the model."""
    return [str(i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]


def calling(name: str, arguments: str) -> Callable[[dict[str, Any]], responses.Answer]:
    """A model that calls ``name`` with ``arguments`` (text, as sent), then answers ``DONE``."""

    def respond(body: dict[str, Any]) -> responses.Answer:
        if outputs(body):
            return responses.answer(DONE)
        return responses.answer(responses.function_call("call_1", name, arguments))

    return respond


class Desk:
    """The agent's tools, counting the times each ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @function_tool
        async def ping() -> str:
            """Check the desk is there."""
            self.ran.append("ping")
            return "pong"

        @function_tool
        async def lookup_order(order: str) -> dict[str, Any]:
            """Look an order up: its total."""
            self.ran.append("lookup_order")
            return {"order": order, "total": 30.0}

        @function_tool(needs_approval=True)
        async def refund(order: str) -> str:
            """Refund an order."""
            self.ran.append("refund")
            return f"refunded {order}"

        self.tools: list[Tool] = [ping, lookup_order, refund]


@asynccontextmanager
async def supervised(
    root: Path, api: responses.ResponsesAPI | chat.ChatAPI, desk: Desk, *, watch: bool = False
) -> AsyncIterator[tuple[Supervisor, TetherRunner]]:
    async with api.client() as client:
        model: Model = (
            OpenAIResponsesModel(model="gpt-5-mini", openai_client=client)
            if isinstance(api, responses.ResponsesAPI)
            else OpenAIChatCompletionsModel(model="gpt-5-mini", openai_client=client)
        )
        agent = Agent(name="desk", instructions="Look orders up.", model=model, tools=desk.tools)
        runner = TetherRunner(
            agent,
            run_config=RunConfig(tracing_disabled=True),
            tools={name: {"policy": "rerun"} for name in ("ping", "lookup_order", "refund")},
        )
        async with Supervisor(
            tether.FileStore(root),
            model=runner.model,
            tools=runner.tools,
            sweep_interval=None,
            clock=VirtualClock(autojump_threshold=0),
            on_text=(lambda run_id, text: None) if watch else None,
        ) as sup:
            yield sup, runner


async def run_to_the_end(tmp_path: Path, api: Any, desk: Desk) -> tuple[Any, Any]:
    """One run of the desk agent, to its end: its view and the SDK's result of it."""
    async with supervised(tmp_path, api, desk) as (sup, runner):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        return await sup.inspect(RUN), await runner.result(sup, RUN)


async def test_a_call_with_no_arguments_runs_its_tool_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """Some servers send ``""`` as the arguments of a tool that takes none: the SDK reads no
    arguments, runs the tool, and asks the model again with its output."""
    api = responses.ResponsesAPI(respond=calling("ping", ""))
    desk = Desk()
    view, result = await run_to_the_end(tmp_path, api, desk)
    assert desk.ran == ["ping"]
    assert view.final_text == DONE
    assert result.final_output == DONE
    assert [outputs(b) for b in api.bodies] == [[], ["pong"]]


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("lookup_order", "{oops", "they are not valid JSON"),
        ("lookup_order", "[1, 2]", "they are JSON but not an object (list)"),
        ("ping", "{oops", "they are not valid JSON"),
        ("refund", "{oops", "they are not valid JSON"),  # needs_approval: nothing to approve
    ],
)
async def test_a_call_whose_arguments_cannot_be_read_runs_nothing_and_the_model_is_asked_again(
    tmp_path: Path, tool: str, arguments: str, said: str
) -> None:
    api = responses.ResponsesAPI(respond=calling(tool, arguments))
    desk = Desk()
    view, result = await run_to_the_end(tmp_path, api, desk)
    assert desk.ran == []
    assert view.final_text == DONE
    assert result.final_output == DONE
    assert len(api.bodies) == 2
    (error,) = outputs(api.bodies[1])
    assert said in error
    assert repr(arguments) in error  # the model sees what it wrote
    events = await read_events(tmp_path, RUN)
    assert of_type(events, ToolStarted) == []
    (answered,) = of_type(events, ToolResult)
    assert not answered.ok
    first = of_type(events, ModelResponse)[0]
    (use,) = [b for b in first.message["content"] if b["type"] == "tool_use"]
    assert said in use["input_error"]


async def test_a_run_that_stops_for_an_approval_tether_does_not_give_is_no_final_answer() -> None:
    """The SDK ends a run it stops for a person with ``final_output`` ``None``: a step that
    ends so (an approval tether's gate does not give, a tool the runner did not wrap) fails,
    and is never the run's final answer ``null``."""
    from agents import Usage as AgentsUsage
    from agents.items import ModelResponse as AgentsResponse
    from openai.types.responses import ResponseFunctionToolCall

    from tether.integrations._steps import Recorded, RecordedResult
    from tether.integrations.openai_agents._step import (
        FRAMEWORK,
        StepModel,
        dump_response,
        run_step,
    )

    @function_tool(needs_approval=True)
    async def refund(order: str) -> str:
        """Refund an order."""
        raise AssertionError("not run")

    class Unreachable(OpenAIResponsesModel):
        def __init__(self) -> None:
            pass

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("no request when replaying")

    call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="refund", arguments='{"order": "A-1"}'
    )
    response = AgentsResponse(output=[call], usage=AgentsUsage(requests=1), response_id="r1")
    recorded = Recorded(
        FRAMEWORK,
        prompt=PROMPT,
        responses=[dump_response(response)],
        results={(0, "call_1"): RecordedResult("refunded A-1", error=False)},
        steps=2,
    )
    agent = Agent(name="desk", model=StepModel(Unreachable()), tools=[refund])  # not wrapped
    with pytest.raises(tether.ModelError) as caught:
        await run_step(
            agent,
            recorded,
            context=None,
            run_config=RunConfig(tracing_disabled=True),
            max_turns=4,
            ask=False,
        )
    assert not caught.value.transient
    assert "stopped for approvals tether does not give: refund" in caught.value.reason


def failing(first: ApiError | responses.Answer) -> Callable[[dict[str, Any]], Any]:
    """A model whose first answer is ``first`` (an error, a failed response), then ``DONE``."""
    asked: list[int] = []

    def respond(body: dict[str, Any]) -> ApiError | responses.Answer:
        asked.append(1)
        return first if len(asked) == 1 else responses.answer(DONE)

    return respond


async def test_a_quota_used_up_parks_the_run_for_a_person_at_once(tmp_path: Path) -> None:
    """A 429 is worth waiting for, but not one that says the account's quota is used up: the
    run parks, as an ``OpenAIModel`` run does, with what the API said."""
    quota = api_error(
        429, "insufficient_quota", "You exceeded your quota.", code="insufficient_quota"
    )
    api = responses.ResponsesAPI(respond=lambda body: quota)
    async with supervised(tmp_path, api, Desk()) as (sup, _):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
    assert len(api.bodies) == 1
    (parked,) = of_type(await read_events(tmp_path, RUN), Parked)
    assert "HTTP 429 insufficient_quota: You exceeded your quota." in parked.reason


async def test_a_rate_limit_is_asked_again_after_the_wait_the_server_asked_for(
    tmp_path: Path,
) -> None:
    limited = api_error(429, "requests", "Slow down.", code="rate_limit_exceeded", retry_after="7")
    api = responses.ResponsesAPI(respond=failing(limited))
    async with supervised(tmp_path, api, Desk()) as (sup, _):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    (failed,) = of_type(await read_events(tmp_path, RUN), ModelFailed)
    assert failed.kind == "transient"
    assert "HTTP 429 rate_limit_exceeded: Slow down." in failed.error
    assert failed.retry_at == pytest.approx(failed.at + 7.0, abs=0.01)
    assert len(api.bodies) == 2


@pytest.mark.parametrize(
    ("code", "status", "watch"),
    [
        ("server_error", RunStatus.DONE, True),
        ("invalid_prompt", RunStatus.NEEDS_ATTENTION, True),
        ("invalid_prompt", RunStatus.NEEDS_ATTENTION, False),
    ],
    ids=["streamed-server_error", "streamed-invalid_prompt", "plain-invalid_prompt"],
)
async def test_a_failed_response_is_classified_by_its_code(
    tmp_path: Path, code: str, status: RunStatus, watch: bool
) -> None:
    """A streamed response that ``failed`` with a server-side code is asked again, as an
    ``OpenAIModel`` run asks it; another code parks the run with the code and message. (A
    response that failed unstreamed reaches tether as the SDK's ``ModelBehaviorError``, its
    code only in its words: it parks the run, saying them.)"""
    api = responses.ResponsesAPI(respond=failing(responses.failed(code, "it went wrong")))
    async with supervised(tmp_path, api, Desk(), watch=watch) as (sup, _):
        await sup.start(RUN, PROMPT)
        rested = await sup.wait(RUN, timeout=WAIT)
    assert rested is status
    events = await read_events(tmp_path, RUN)
    if status is RunStatus.DONE:
        (failed,) = of_type(events, ModelFailed)
        said = failed.error
    else:
        (parked,) = of_type(events, Parked)
        said = parked.reason
    assert code in said
    assert "it went wrong" in said


@pytest.mark.parametrize(
    ("code", "status"),
    [("server_error", RunStatus.DONE), ("invalid_prompt", RunStatus.NEEDS_ATTENTION)],
)
async def test_an_error_event_that_breaks_the_stream_off_is_classified_by_its_code(
    tmp_path: Path, code: str, status: RunStatus
) -> None:
    broken = api_error(500, "server_error", "it went wrong", code=code, in_stream=True)
    api = responses.ResponsesAPI(respond=failing(broken))
    async with supervised(tmp_path, api, Desk(), watch=True) as (sup, _):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is status
    events = await read_events(tmp_path, RUN)
    said = of_type(events, ModelFailed)[0].error if status is RunStatus.DONE else ""
    said += " ".join(p.reason for p in of_type(events, Parked))
    assert f"the stream broke off: {code}: it went wrong" in said


async def test_an_error_chunk_that_breaks_a_chat_stream_off_is_asked_again(tmp_path: Path) -> None:
    """Chat Completions breaks a stream off with an error in place of a chunk, which the
    ``openai`` SDK raises as an ``APIError``: a server error is asked again."""
    broken = api_error(500, "server_error", "it went wrong", code="server_error", in_stream=True)
    answers = iter([broken, chat.answer(DONE)])
    api = chat.ChatAPI(respond=lambda body: next(answers))
    async with supervised(tmp_path, api, Desk(), watch=True) as (sup, _):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    (failed,) = of_type(await read_events(tmp_path, RUN), ModelFailed)
    assert failed.error == "the stream broke off: server_error: it went wrong"


@pytest.mark.parametrize("watch", [True, False], ids=["streamed", "plain"])
async def test_the_usage_journaled_keeps_the_reasoning_and_cached_tokens(
    tmp_path: Path, watch: bool
) -> None:
    used = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 2},
    }
    api = responses.ResponsesAPI(respond=lambda body: responses.answer(DONE, usage=used))
    async with supervised(tmp_path, api, Desk(), watch=watch) as (sup, _):
        await sup.start(RUN, PROMPT)
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    (saved,) = of_type(await read_events(tmp_path, RUN), ModelResponse)
    assert saved.usage == Usage(
        input_tokens=20, output_tokens=9, cache_read_input_tokens=100, reasoning_tokens=2
    )
