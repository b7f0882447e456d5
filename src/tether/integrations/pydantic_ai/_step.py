"""One step of a pydantic-ai agent's run: its loop replayed from the journal to its frontier.

``run_step`` runs ``agent.run`` again from the run's prompt with a capability (pydantic-ai's
public extension point for wrapping model requests and tool executions, the one its own
durable integrations build on) that answers from the journal:

- the i-th model request gets the journal's i-th response; at the frontier, the step's one real
  request is made (``handler``); a second one stops the step (the agent asks its model again
  with nothing to run first, as after a retry prompt);
- a tool call gets its recorded result (an error recorded from a ``ModelRetry`` is raised
  again as one, so the agent counts its retries as it would); at the frontier, it is deferred
  with pydantic-ai's own ``CallDeferred``, so the agent ends the step with
  ``DeferredToolRequests``: the calls tether's loop then runs;
- approval-required tools are handed to the capability as plain function tools: tether's gate
  asks the person before the call runs (the tool is registered with ``approval``).

Nothing in the replay runs a tool or asks the model for an answer the journal holds.

A step streams when someone watches: the supervisor's text observer (``on_text``, through
``text_sink``) or the application's ``event_stream_handler``. The agent is then run with an
event stream handler of its own (``agent.run(event_stream_handler=...)``, which makes pydantic-ai
stream its requests), and only the events of the step's one real request pass on: its text to
the observer and its events to the application's handler as they arrive. The events
pydantic-ai makes up for a response answered from the journal, and those of the tools the
replay answers, are dropped, so a resumed run never streams a journaled response again. The
response journaled is the one pydantic-ai assembled once the stream ended; a stream that broke
off raises in pydantic-ai's model, and nothing of it is journaled.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, ModelRetry, RunContext
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessagesTypeAdapter,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_core import to_jsonable_python

from ..._errors import ModelError
from ...journal import Usage
from ...models import ModelReply, text_sink
from ...models._openai_errors import transient_status
from .._steps import Again, Intent, Recorded, step_reply

FRAMEWORK = "pydantic-ai"
RETRY_PREFIX = "ModelRetry: "
"""How tether records an error result from a tool that raised ``ModelRetry``."""


class _Again(BaseException):
    """Stops a step: the agent asks its model a second time (a ``BaseException`` so that no
    ``except Exception`` in the framework takes it for a failed request)."""


class _ApprovedHere(WrapperToolset[Any]):
    """The agent's tools with approval left to tether's gate: a tool pydantic-ai would defer
    for approval is a plain function tool to the replay (its calls are never run there)."""

    async def get_tools(self, ctx: Any) -> dict[str, Any]:
        tools: dict[str, Any] = await super().get_tools(ctx)
        return {
            name: (
                replace(tool, tool_def=replace(tool.tool_def, kind="function"))
                if tool.tool_def.kind == "unapproved"
                else tool
            )
            for name, tool in tools.items()
        }


class _FromJournal(AbstractCapability[Any]):
    """Answers one replay of the agent's run from the journal (see the module's docstring)."""

    def __init__(self, recorded: Recorded, *, ask: bool) -> None:
        self.recorded = recorded
        self.ask = ask
        self.served = 0
        self.new: ModelResponse | None = None
        self.again = False
        self.intents: list[Intent] = []
        self.live = False
        """Whether the step's one real request is under way (its events are the live ones)."""

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return _ApprovedHere(toolset)

    async def wrap_model_request(
        self, ctx: Any, *, request_context: Any, handler: Any
    ) -> ModelResponse:
        try:
            kept = self.recorded.replayed(self.served, ask=self.ask, answered=self.new is not None)
        except Again:
            self.again = True
            raise _Again from None
        if kept is not None:
            self.served += 1
            return load_response(kept)
        self.live = True
        try:
            response: ModelResponse = await handler(request_context)
        finally:
            self.live = False
        self.new = response
        self.served += 1
        return response

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        index = self.served - 1
        outcome = self.recorded.outcome(index, call.tool_call_id)
        if outcome is not None:
            if outcome.error:
                if outcome.text.startswith(RETRY_PREFIX):
                    raise ModelRetry(outcome.text[len(RETRY_PREFIX) :])
                return outcome.text
            return _value(outcome.text)
        last = len(self.recorded.responses) - (self.new is None)
        if not self.ask or index != last:
            raise self.recorded.diverged(
                f"it calls {call.tool_name} ({call.tool_call_id}) after answer {index + 1}, "
                "a call the journal has no result for"
            )
        self.intents.append(Intent(call.tool_call_id, call.tool_name, call.args_as_dict()))
        raise CallDeferred


def _value(text: str) -> Any:
    """A recorded result as the agent gets it back: JSON objects and arrays as values (what the
    tool returned), anything else as the text the model read."""
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def dump_response(response: ModelResponse) -> Any:
    """A response as the journal keeps it (pydantic-ai's own JSON form of its messages)."""
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def load_response(data: Any) -> ModelResponse:
    message = ModelMessagesTypeAdapter.validate_python([data])[0]
    if not isinstance(message, ModelResponse):
        raise ModelError(FRAMEWORK, f"the journal holds a {type(message).__name__} as a response")
    return message


def output_types(agent: Agent[Any, Any]) -> list[Any]:
    """The agent's output types, and ``DeferredToolRequests`` (how a step ends with calls)."""
    spec = agent.output_type
    kinds: list[Any] = (
        list(spec) if isinstance(spec, Sequence) and not isinstance(spec, str) else [spec]
    )
    if DeferredToolRequests not in kinds:
        kinds.append(DeferredToolRequests)
    return kinds


@dataclass(frozen=True)
class Replayed:
    """What one replay found: the step to journal, and the agent's result when it ended."""

    reply: ModelReply
    result: Any = None
    ended: bool = False


def _streamer(
    step: _FromJournal, sink: Callable[[str], None] | None, handler: EventStreamHandler[Any] | None
) -> EventStreamHandler[Any]:
    """The event stream handler of one replay (see the module's docstring)."""

    async def forward(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        iterator = aiter(events)
        first = await anext(iterator, None)
        if first is None:
            return
        if not step.live:  # answered from the journal, or a tool the replay answers
            async for _ in iterator:
                pass
            return

        async def live() -> AsyncIterator[AgentStreamEvent]:
            yield _told(first, sink)
            async for event in iterator:
                yield _told(event, sink)

        pieces = live()
        if handler is not None:
            await handler(ctx, pieces)
        async for _ in pieces:  # whatever the handler left
            pass

    return forward


def _told(event: AgentStreamEvent, sink: Callable[[str], None] | None) -> AgentStreamEvent:
    """``event``, its text (if any) sent to ``sink`` first."""
    if sink is not None:
        text = None
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            text = event.part.content
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            text = event.delta.content_delta
        if text:
            sink(text)
    return event


async def run_step(
    agent: Agent[Any, Any],
    recorded: Recorded,
    *,
    deps: Any,
    instructions: str | None,
    ask: bool = True,
    stream: EventStreamHandler[Any] | None = None,
) -> Replayed:
    """Replay the agent's run from the journal and take its next step.

    Args:
        agent: the agent.
        recorded: what the journal holds of the run.
        deps: the agent's dependencies.
        instructions: more instructions for the run (the system prompt it was started with).
        ask: make the step's real request at the frontier; ``False`` only replays a finished
            run (any request or call not in the journal is a divergence).
        stream: the application's event stream handler, given the events of the step's real
            request as they arrive (the agent's own ``event_stream_handler`` when ``None``).

    Raises:
        ModelError: the model request failed (transient for a dropped connection, a timeout,
            HTTP 408/409/429/5xx unless a 429 says the quota is used up); the agent's run
            raised (permanent, naming the error); the replay no longer matches the journal
            (permanent).
    """
    step = _FromJournal(recorded, ask=ask)
    sink = text_sink.get() if ask else None
    handler = stream or agent.event_stream_handler
    streaming = None
    if sink is not None or handler is not None:
        streaming = _streamer(step, sink, handler if ask else None)
    try:
        result: Any = await agent.run(
            recorded.prompt,
            deps=deps,
            instructions=instructions,
            output_type=output_types(agent),
            capabilities=[step],
            event_stream_handler=streaming,
        )
    except _Again:
        return Replayed(_reply(step, again=True))
    except ModelError:
        raise
    except ModelHTTPError as exc:
        # As tether's own OpenAI model decides (a 429 that says the quota is used up parks the
        # run for a person: waiting will not help), and after the wait the server asked for.
        transient = transient_status(exc.status_code, exc.provider_error_code)
        raise ModelError(
            FRAMEWORK,
            f"{type(exc).__name__}: {exc}",
            transient=transient,
            retry_after=exc.retry_after if transient else None,
        ) from exc
    except ModelAPIError as exc:
        raise ModelError(FRAMEWORK, f"{type(exc).__name__}: {exc}", transient=True) from exc
    except Exception as exc:
        raise ModelError(FRAMEWORK, f"the agent's run raised {type(exc).__name__}: {exc}") from exc
    output = result.output
    if isinstance(output, DeferredToolRequests):
        if not step.intents:
            raise ModelError(
                FRAMEWORK,
                "the agent deferred calls tether did not run: "
                + ", ".join(c.tool_name for c in [*output.calls, *output.approvals])
                + " (external tools are not supported)",
            )
        return Replayed(_reply(step))
    final = output if isinstance(output, str) else json.dumps(to_jsonable_python(output))
    return Replayed(_reply(step, final=final), result=result, ended=True)


def _reply(step: _FromJournal, *, again: bool = False, final: str | None = None) -> ModelReply:
    new = step.new
    if final is not None:
        texts = [final]
    elif new is not None:
        texts = [p.content for p in new.parts if isinstance(p, TextPart)]
    else:
        texts = []
    usage = None
    if new is not None:
        u = new.usage
        usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_input_tokens=u.cache_read_tokens,
            cache_creation_input_tokens=u.cache_write_tokens,
        )
    return step_reply(
        response=None if new is None else dump_response(new),
        texts=texts,
        calls=step.intents,
        again=again,
        usage=usage,
        response_id=None if new is None else new.provider_response_id,
    )
