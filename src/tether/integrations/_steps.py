"""How a framework's agent run is kept in a tether journal, one step per model call.

A framework (pydantic-ai, the OpenAI Agents SDK) runs its own agent loop: it builds the
model's requests, decides which tools to run, hands off, checks guardrails. tether's loop
drives the run all the same: each time it asks its model for the next turn, the integration
runs the framework's loop again from the start, answering every model request and every tool
call the journal already holds from the journal, until the loop needs something the journal
does not have yet (the *frontier*). What it does there is the step:

- it needs a model response: the one real request of the step is made, and the loop goes on
  past it until it wants tools run, ends, or needs the model again;
- it wants tools run: they become the step's ``tool_use`` blocks, journaled with the step (intent
  before act) and run by tether's loop under each tool's replay policy, approval and budgets;
- it ended: the step's text is the run's final answer, and no ``tool_use`` block follows, so
  tether's loop ends the run ``done``;
- it needs the model again with nothing to run in between (a retry prompt, a handoff's next
  agent): the step carries one call of ``CONTINUE_TOOL``, a tool that does nothing, so tether's
  loop asks for the next step.

Each step is an assistant message: ``text`` blocks (for people), the ``tool_use`` blocks, and
one ``STEP_BLOCK`` block holding the framework's own response as it serialized it (``None``
for a step that made no request), which only the integration reads back. A call's
``tool_use`` block keeps the framework's id for it in ``call_id`` (tether may rename its own
id, see docs/design.md invariant 10): results are found again by (response index, framework id),
since frameworks reuse ids across turns. Everything comes from the journal, so every process
replays the same steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .._errors import ModelError, ToolDefinitionError
from ..journal import Usage
from ..models import (
    AgentStepBlock,
    ContentBlock,
    Message,
    ModelReply,
    ToolUseBlock,
    is_known,
    tool_uses,
)
from ..tools import ToolRegistry
from ..tools._adapters import ToolOptions

ToolSettings = ToolOptions | Mapping[str, Any]
"""What an application says of one of a framework's tools: a ``tether.mcp.ToolOptions``, or a
mapping of its fields (``{"policy": "idempotency_key", "approval": True}``)."""

STEP_BLOCK: Final = "agent_step"
"""The type of the block that holds a step's framework response in a journaled message."""

CONTINUE_TOOL = "tether_continue"
"""The tool a step calls when the framework asks its model again with nothing to run between."""

CONTINUE_RESULT = "continued"


@dataclass(frozen=True)
class RecordedResult:
    """A recorded tool result: the text the model read, and whether it was an error."""

    text: str
    error: bool


@dataclass(frozen=True)
class Intent:
    """A call the framework wants run at the frontier: its id, tool name and arguments.

    ``input_error`` says why the model's arguments are no JSON object (``arguments`` is then
    empty): tether's loop runs nothing for the call and answers it with an error that says so.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    input_error: str | None = None


class Again(Exception):
    """A step's framework asks for a second real answer: the step ends with the first."""


@dataclass
class Recorded:
    """What the journal holds of a framework's run, read from tether's conversation.

    Attributes:
        framework: the framework's name, for errors.
        prompt: the run's input, as its first user message carried it.
        responses: each step's framework response as serialized, oldest first (steps that made
            no request are left out).
        results: ``(response index, framework call id) -> RecordedResult``; the index is the
            response the call followed (``-1`` before any).
        captures: values a step kept beside its response (guardrail outcomes), by key.
        steps: the number of steps journaled.
    """

    framework: str
    prompt: Any = None
    responses: list[Any] = field(default_factory=list)
    results: dict[tuple[int, str], RecordedResult] = field(default_factory=dict)
    captures: dict[str, Any] = field(default_factory=dict)
    steps: int = 0

    def outcome(self, response: int, call_id: str) -> RecordedResult | None:
        """The recorded result of call ``call_id`` made after response ``response``."""
        return self.results.get((response, call_id))

    def replayed(self, index: int, *, ask: bool, answered: bool) -> Any | None:
        """The replay decision for the framework's request for answer ``index`` of its run:
        the journaled response to give back (as serialized), or ``None`` when this step is to
        make its one real request.

        ``ask``: this step may make a real request; ``answered``: it made it already (``Again``
        is raised: the framework must stop so that tether journals that answer first).

        Raises:
            ModelError: the journal has no answer ``index`` and none may be asked for.
            Again: a second real request in one step.
        """
        if index < len(self.responses):
            return self.responses[index]
        if not ask:
            raise self.diverged(f"it asks the model for answer {index + 1}")
        if answered:
            raise Again
        return None

    def diverged(self, what: str) -> ModelError:
        """The error for a replay that no longer matches the journal (the agent's code changed)."""
        return ModelError(
            self.framework,
            f"the agent's run no longer matches its journal: {what}; deploy the code the run "
            "started with, or cancel the run",
        )


def read_steps(framework: str, messages: Sequence[Message]) -> Recorded:
    """Read the steps of a framework's run back from tether's conversation ``messages``."""
    recorded = Recorded(framework)
    if messages:
        recorded.prompt = messages[0].get("content")
    framework_ids: dict[str, tuple[int, str]] = {}
    for message in messages[1:]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        if message.get("role") == "assistant":
            recorded.steps += 1
            for block in content:
                if is_known(block) and block["type"] == STEP_BLOCK:
                    if block.get("response") is not None:
                        recorded.responses.append(block["response"])
                    recorded.captures.update(block.get("captures") or {})
            index = len(recorded.responses) - 1
            for use in tool_uses(content):
                if use.get("name") != CONTINUE_TOOL:
                    framework_ids[use["id"]] = (index, str(use.get("call_id", use["id"])))
        else:
            for block in content:
                if not (is_known(block) and block["type"] == "tool_result"):
                    continue
                key = framework_ids.get(block.get("tool_use_id", ""))
                if key is not None:
                    recorded.results[key] = RecordedResult(
                        _text(block.get("content")), bool(block.get("is_error"))
                    )
    return recorded


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: their text
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def step_reply(
    *,
    response: Any,
    texts: Iterable[str] = (),
    calls: Sequence[Intent] = (),
    again: bool = False,
    usage: Usage | None = None,
    captures: dict[str, Any] | None = None,
    response_id: str | None = None,
) -> ModelReply:
    """The ``ModelReply`` that journals one step.

    Args:
        response: the framework's response as it serialized it, or ``None`` for a step that
            made no request.
        texts: text for people (the response's text, or the run's final answer).
        calls: the calls the framework wants run, in its order.
        again: the framework asks its model again with nothing to run first.
        usage: the tokens the step's request used.
        captures: values kept beside the response (guardrail outcomes).
        response_id: the provider's id of the response, when it gives one.
    """
    content: list[ContentBlock] = [{"type": "text", "text": t} for t in texts if t]
    for call in calls:
        use: ToolUseBlock = {
            "type": "tool_use",
            "id": call.call_id or "call",
            "name": call.name,
            "input": call.arguments,
            "call_id": call.call_id,
        }
        if call.input_error is not None:
            use["input_error"] = call.input_error
        content.append(use)
    if again and not calls:
        content.append({"type": "tool_use", "id": "continue", "name": CONTINUE_TOOL, "input": {}})
    block: AgentStepBlock = {"type": STEP_BLOCK, "response": response}
    if captures:
        block["captures"] = captures
    content.append(block)
    return ModelReply(
        content=content,
        usage=usage or Usage(),
        stop_reason="tool_use" if (calls or again) else "end_turn",
        stop_details=None if response is not None else {"request": "none: replayed agent step"},
        response_id=response_id,
    )


def add_continue_tool(registry: ToolRegistry) -> None:
    """Register ``CONTINUE_TOOL`` (safe to run again: it does nothing) unless it is there."""
    if CONTINUE_TOOL in registry:
        return

    async def proceed() -> str:
        """Go on with the agent's run (the agent asks its model again)."""
        return CONTINUE_RESULT

    registry.register(proceed, name=CONTINUE_TOOL, policy="rerun")


def tool_options(settings: Mapping[str, ToolSettings] | None) -> dict[str, ToolOptions]:
    """``ToolOptions`` by tool name from what the application gave.

    Raises:
        ToolDefinitionError: a mapping with a key ``ToolOptions`` has no field for, naming it.
    """
    options: dict[str, ToolOptions] = {}
    for name, given in (settings or {}).items():
        if isinstance(given, ToolOptions):
            options[name] = given
            continue
        try:
            options[name] = ToolOptions(**dict(given))
        except TypeError as exc:
            raise ToolDefinitionError(name, f"bad tool options {dict(given)!r}: {exc}") from None
    return options
