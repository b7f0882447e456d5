"""One step of an Agents SDK run: ``Runner.run`` replayed from the journal to its frontier.

``prepare`` installs, once per agent of the graph, wrappers that act only inside a step (a
context variable says which) and pass everything through outside one, so the agents still
work with a plain ``Runner.run``:

- each agent's model answers the i-th request of the run with the journal's i-th response; at
  the frontier it makes the step's one real request, and when the response calls function
  tools or hands off, those calls are the step's calls and the step stops there, before the
  SDK runs anything (intent before act); a second request in one step (a handoff's next
  agent, a retry) stops it too, to be asked in the next step; when the supervisor watches text
  (``on_text``), that request streams (``streamed``), and only a stream that reached
  ``response.completed`` is an answer;
- each function tool answers with its recorded result (the SDK never runs the tool inside a
  step; tether's loop does, under the tool's policy) and asks for no approval there (tether's
  gate has asked before the call ran); a call whose arguments are no JSON object is journaled
  with ``input_error``, so tether's loop runs nothing and answers it with an error, and inside
  steps the SDK reads its arguments as ``{}`` (an approval function cannot read the model's,
  and the SDK would stop the run for a person);
- each input guardrail's outcome is kept with the step that ran it and given back on replay,
  so a guardrail that calls a model calls it once.

Everything else (handoffs and their input filters, ``tool_use_behavior``, output types, output
guardrails, hooks) is the SDK's own code, run again on each replay.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import openai
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    InputGuardrailTripwireTriggered,
    Model,
    ModelResponse,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
)
from agents.items import TResponseOutputItem
from agents.usage import Usage as AgentsUsage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from ..._errors import ModelError
from ...journal import Usage
from ...models import ModelReply, text_sink
from ...models._base import StreamEnd
from ...models._openai_errors import failure, status_error
from .._steps import Again, Intent, Recorded, step_reply

FRAMEWORK = "openai-agents"
_OUTPUT = TypeAdapter(list[TResponseOutputItem])
_USAGE = TypeAdapter(AgentsUsage)
ARGUMENT_ECHO = 300
"""Characters of unreadable arguments quoted back to the model in the call's error result."""


class _Stop(BaseException):
    """Ends a step where it stands (a ``BaseException`` so that the SDK's own error handling
    does not take it for a failure)."""


@dataclass
class Step:
    """One replay's state: what the journal holds and what this step found."""

    recorded: Recorded
    ask: bool
    served: int = 0
    new: ModelResponse | None = None
    intents: list[Intent] = field(default_factory=list)
    again: bool = False
    captures: dict[str, Any] = field(default_factory=dict)
    running: list[anyio.Event] = field(default_factory=list)

    async def settle(self) -> None:
        """Wait for the guardrails this step started, so their outcomes go with it."""
        for event in self.running:
            await event.wait()


_step: ContextVar[Step | None] = ContextVar("tether_agents_step", default=None)


def dump_response(response: ModelResponse) -> dict[str, Any]:
    return {
        "output": [to_jsonable_python(item, exclude_none=True) for item in response.output],
        "usage": _USAGE.dump_python(response.usage, mode="json"),
        "response_id": response.response_id,
    }


def load_response(data: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        output=_OUTPUT.validate_python(data["output"]),
        usage=_USAGE.validate_python(data["usage"]),
        response_id=data.get("response_id"),
    )


class StepModel(Model):
    """An agent's model inside steps (see the module's docstring); ``real`` outside them."""

    def __init__(self, real: Model) -> None:
        self.real = real

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = _step.get()
        if step is None:
            return await self.real.get_response(*args, **kwargs)
        try:
            kept = step.recorded.replayed(step.served, ask=step.ask, answered=step.new is not None)
        except Again:
            step.again = True
            await step.settle()
            raise _Stop from None
        names = _tool_names(args, kwargs)
        if kept is not None:
            step.served += 1
            return _readable(load_response(kept), names)
        sink = text_sink.get()
        if sink is None:
            response = await self.real.get_response(*args, **kwargs)
        else:
            response = await streamed(self.real, sink, args, kwargs)
        step.new = response
        step.served += 1
        tools, handoffs = names
        for item in response.output:
            if not isinstance(item, ResponseFunctionToolCall):
                continue
            if item.name in tools:
                arguments, error = _arguments(item.arguments)
                step.intents.append(Intent(item.call_id, item.name, arguments, error))
            elif item.name in handoffs:  # the SDK hands off whatever the arguments say
                step.intents.append(Intent(item.call_id, item.name, _arguments(item.arguments)[0]))
        if step.intents:
            await step.settle()
            raise _Stop
        return _readable(response, names)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        if _step.get() is not None:
            raise ModelError(FRAMEWORK, "Runner.run_streamed is not supported inside a tether run")
        return self.real.stream_response(*args, **kwargs)


async def streamed(
    model: Model, sink: Callable[[str], None], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> ModelResponse:
    """The step's request made streaming (the supervisor watches text): each piece of the
    response's text goes to ``sink`` as it arrives, and the response is the one the stream's
    ``response.completed`` event carries, as the SDK's own streamed run takes it.

    Raises:
        ModelError: (transient) the stream ended before ``response.completed`` (nothing of it
            is kept, ``StreamEnd``'s rule); an ``error`` event broke it off, or the response
            ``failed``, classified by the error's code as ``OpenAIModel`` classifies it
            (``server_error`` is transient); (permanent) the response ended ``incomplete``.
    """
    end = StreamEnd(FRAMEWORK, "response.completed")
    completed: Response | None = None
    async for event in model.stream_response(*args, **kwargs):
        kind = getattr(event, "type", None)
        if isinstance(event, ResponseTextDeltaEvent):
            sink(event.delta)
        elif isinstance(event, ResponseCompletedEvent):
            end.saw("response.completed")
            completed = event.response
        elif kind == "response.failed":
            error = getattr(getattr(event, "response", None), "error", None)
            code = getattr(error, "code", None)
            raise failure(
                FRAMEWORK, "the response failed", code, str(getattr(error, "message", ""))
            )
        elif kind == "response.incomplete":
            details = getattr(getattr(event, "response", None), "incomplete_details", None)
            why = getattr(details, "reason", None)
            raise ModelError(
                FRAMEWORK, "the response ended incomplete" + (f": {why}" if why else "")
            )
        elif kind in ("error", "response.error"):
            code = getattr(event, "code", None)
            said = str(getattr(event, "message", None) or kind)
            raise failure(FRAMEWORK, "the stream broke off", code, said)
    end.check()
    assert completed is not None  # end.check() saw response.completed
    used = completed.usage
    usage = AgentsUsage(requests=1)
    if used is not None:
        usage = AgentsUsage(
            requests=1,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
            total_tokens=used.total_tokens,
            input_tokens_details=used.input_tokens_details,
            output_tokens_details=used.output_tokens_details,
        )
    return ModelResponse(output=completed.output, usage=usage, response_id=completed.id)


def _tool_names(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The names of a request's function tools and of its handoffs."""
    tools = kwargs.get("tools", args[3] if len(args) > 3 else [])
    handoffs = kwargs.get("handoffs", args[5] if len(args) > 5 else [])
    return {t.name for t in tools if isinstance(t, FunctionTool)}, {h.tool_name for h in handoffs}


def _arguments(text: str) -> tuple[dict[str, Any], str | None]:
    """A call's arguments as the SDK reads them (no text is no arguments; ``NaN`` and the
    infinities, which no JSON has, are refused), or ``{}`` and why they are no JSON object."""
    try:
        value = json.loads(text or "{}", parse_constant=_no_constant)
    except ValueError as exc:
        return {}, f"they are not valid JSON ({exc}): {_echo(text)}"
    if not isinstance(value, dict):
        return {}, f"they are JSON but not an object ({type(value).__name__}): {_echo(text)}"
    return value, None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _echo(text: str) -> str:
    if len(text) <= ARGUMENT_ECHO:
        return repr(text)
    return f"{text[:ARGUMENT_ECHO]!r}... ({len(text)} characters)"


def _readable(response: ModelResponse, names: tuple[set[str], set[str]]) -> ModelResponse:
    """``response`` with ``{}`` for the arguments of each function-tool call that has none or
    no JSON object for them: the SDK evaluates a tool's approval function only on arguments it
    can read, and stops the run for a person otherwise, although tether answered that call
    (with an error when they are unreadable) already."""
    tools = names[0]
    output = [
        item.model_copy(update={"arguments": "{}"})
        if isinstance(item, ResponseFunctionToolCall)
        and item.name in tools
        and (not item.arguments or _arguments(item.arguments)[1] is not None)
        else item
        for item in response.output
    ]
    if output == response.output:
        return response
    return replace(response, output=output)


def replayed_tool(tool: FunctionTool) -> FunctionTool:
    """``tool`` answering from the journal inside steps, itself outside them."""
    original_invoke = tool.on_invoke_tool
    original_approval = tool.needs_approval

    async def invoke(ctx: Any, arguments: str) -> Any:
        step = _step.get()
        if step is None:
            return await original_invoke(ctx, arguments)
        outcome = step.recorded.outcome(step.served - 1, ctx.tool_call_id)
        if outcome is None:
            raise step.recorded.diverged(
                f"it calls {tool.name} ({ctx.tool_call_id}), a call the journal has no result for"
            )
        return outcome.text

    if original_approval is False:  # the SDK asks a function even with arguments it cannot read
        return replace(tool, on_invoke_tool=invoke)

    async def approval(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        if _step.get() is not None or isinstance(original_approval, bool):
            return _step.get() is None and bool(original_approval)
        return await original_approval(ctx, params, call_id)

    return replace(tool, on_invoke_tool=invoke, needs_approval=approval)


def replayed_guardrail(guardrail: InputGuardrail[Any]) -> InputGuardrail[Any]:
    """``guardrail`` whose outcome inside steps is journaled once and then given back."""
    function: Callable[..., Any] = guardrail.guardrail_function

    async def check(ctx: Any, agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
        step = _step.get()
        if step is None:
            passed: GuardrailFunctionOutput = await _maybe(function(ctx, agent, given))
            return passed
        key = f"input_guardrail:{agent.name}:{guardrail.get_name()}"
        kept = step.recorded.captures.get(key)
        if kept is not None:
            return GuardrailFunctionOutput(
                output_info=kept["output_info"], tripwire_triggered=kept["tripwire_triggered"]
            )
        done = anyio.Event()
        step.running.append(done)
        try:
            out: GuardrailFunctionOutput = await _maybe(function(ctx, agent, given))
            step.captures[key] = {
                "output_info": to_jsonable_python(out.output_info, fallback=str),
                "tripwire_triggered": out.tripwire_triggered,
            }
            return out
        finally:
            done.set()

    return replace(guardrail, guardrail_function=check, name=guardrail.get_name())


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@dataclass(frozen=True)
class Replayed:
    reply: ModelReply
    result: Any = None


async def run_step(
    agent: Agent[Any],
    recorded: Recorded,
    *,
    context: Any,
    run_config: RunConfig | None,
    max_turns: int,
    ask: bool = True,
) -> Replayed:
    """Replay ``Runner.run(agent, prompt)`` from the journal and take its next step.

    Raises:
        ModelError: the request failed (transient for a dropped connection, a timeout, HTTP
            408/409/429/5xx but a 429 for a quota used up, with the server's ``retry-after``:
            as ``OpenAIModel`` classifies them); a guardrail tripped, the run raised or it
            stopped for an approval (an interruption is never a final answer) (permanent,
            saying which); the replay no longer matches the journal (permanent).
    """
    step = Step(recorded, ask=ask)
    token = _step.set(step)
    try:
        result = await Runner.run(
            agent, recorded.prompt, context=context, max_turns=max_turns, run_config=run_config
        )
    except _Stop:
        return Replayed(_reply(step))
    except ModelError:
        raise
    except InputGuardrailTripwireTriggered as exc:
        raise ModelError(
            FRAMEWORK, f"the input guardrail {exc.guardrail_result.guardrail.get_name()!r} tripped"
        ) from exc
    except OutputGuardrailTripwireTriggered as exc:
        raise ModelError(
            FRAMEWORK, f"the output guardrail {exc.guardrail_result.guardrail.get_name()!r} tripped"
        ) from exc
    except openai.APIStatusError as exc:
        raise status_error(FRAMEWORK, exc) from exc
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise ModelError(FRAMEWORK, f"{type(exc).__name__}: {exc}", transient=True) from exc
    except openai.APIResponseValidationError as exc:
        raise ModelError(FRAMEWORK, f"the response failed validation: {exc}") from exc
    except openai.APIError as exc:  # an error in place of a chunk broke a stream off
        raise failure(FRAMEWORK, "the stream broke off", exc.code or exc.type, exc.message) from exc
    except Exception as exc:
        raise ModelError(FRAMEWORK, f"the agent's run raised {type(exc).__name__}: {exc}") from exc
    finally:
        _step.reset(token)
    if result.interruptions:
        asked = ", ".join(sorted({i.tool_name or "a tool" for i in result.interruptions}))
        raise ModelError(
            FRAMEWORK,
            f"the agent's run stopped for approvals tether does not give: {asked}; only a "
            "function tool's needs_approval goes through tether's gate",
        )
    output = result.final_output
    final = output if isinstance(output, str) else json.dumps(to_jsonable_python(output))
    return Replayed(_reply(step, final=final), result=result)


def _reply(step: Step, *, final: str | None = None) -> ModelReply:
    new = step.new
    texts: list[str] = []
    if final is not None:
        texts = [final]
    elif new is not None:
        for item in new.output:
            for part in getattr(item, "content", None) or []:
                text = getattr(part, "text", None)
                if isinstance(text, str):
                    texts.append(text)
    usage = None
    if new is not None:
        cached = getattr(new.usage.input_tokens_details, "cached_tokens", 0) or 0
        reasoning = getattr(new.usage.output_tokens_details, "reasoning_tokens", 0) or 0
        usage = Usage(
            input_tokens=new.usage.input_tokens - cached,
            output_tokens=new.usage.output_tokens,
            cache_read_input_tokens=cached,
            reasoning_tokens=reasoning,
        )
    return step_reply(
        response=None if new is None else dump_response(new),
        texts=texts,
        calls=step.intents,
        again=step.again and not step.intents,
        usage=usage,
        captures=step.captures,
        response_id=None if new is None else new.response_id,
    )


Invoke = Callable[[Any, str], Awaitable[Any]]
