"""The model seam: the ``Model`` protocol every adapter implements, and the reply it returns.

A model is called with Anthropic Messages-API shaped plain dicts and answers with the assistant's
content blocks as plain dicts, so what the runtime journals is exactly what the next call (or a
resumed process) sends back. Their types (``Message``, ``ContentBlock``, ``ToolDefinition``)
are in ``_messages``. ``check_reply_blocks`` is the one place that decides whether an
answer is usable, and ``StreamEnd`` the one that decides whether a streamed answer is whole;
every adapter runs them before returning.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, final

import msgspec

from .._errors import ModelError, ModelResponseError
from ..journal import Usage
from ._messages import Blocks, ContentBlock, Message, TextBlock, ToolDefinition

BLOCK_TYPES: frozenset[str] = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
"""Assistant content block types whose fields are checked. Any other type (server tool calls
and their results, types a newer API adds) is kept as it came, an opaque dict, and journaled
and sent back byte for byte: only ``tool_use`` blocks are calls the runtime runs."""

# For each block type: the fields it must carry and the type each must have.
_REQUIRED_FIELDS: dict[str, tuple[tuple[str, type], ...]] = {
    "text": (("text", str),),
    "tool_use": (("id", str), ("name", str), ("input", dict)),
    "thinking": (("thinking", str), ("signature", str)),
    "redacted_thinking": (("data", str),),
}
# Fields that must also be non-empty strings (an empty tool call id or name cannot be answered).
_NON_EMPTY: frozenset[tuple[str, str]] = frozenset({("tool_use", "id"), ("tool_use", "name")})

_JSON_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "an array"}


text_sink: ContextVar[Callable[[str], None] | None] = ContextVar("text_sink", default=None)
"""Where a streaming model sends the text of the answer it is receiving, as it arrives.

Set by the runtime around one model call when the supervisor has a text observer; the text is
for people watching, never journaled (the whole answer is, once it ends). A model that does
not stream ignores it.
"""

SystemPrompt = str | list[TextBlock] | None
"""A system prompt as the Messages API takes it: text, a list of text blocks, or none."""

_T = TypeVar("_T")
_COPY_ENCODER = msgspec.msgpack.Encoder()
_COPY_DECODER = msgspec.msgpack.Decoder()


def deep_copy(value: _T) -> _T:
    """A deep copy of a conversation, an answer or its blocks.

    JSON-like values go through msgspec, many times faster than ``copy.deepcopy`` on a long
    conversation (a copy is made at every model call); anything else falls back to
    ``deepcopy``.
    """
    try:
        copied: _T = _COPY_DECODER.decode(_COPY_ENCODER.encode(value))
    except (TypeError, msgspec.EncodeError):
        return copy.deepcopy(value)
    return copied


class ModelReply(msgspec.Struct, frozen=True, kw_only=True):
    """One answer from a model.

    Attributes:
        content: the assistant's content blocks as plain, JSON-able dicts, already checked by
            ``check_reply_blocks``.
        usage: the tokens the call consumed.
        stop_reason: why the model stopped (``"end_turn"``, ``"tool_use"``, ``"max_tokens"``,
            ``"pause_turn"``, ``"refusal"``, ...), or ``None`` when the model does not say.
        stop_details: anything more the model said about why it stopped, as plain JSON.
        response_id: the provider's id of the response (``msg_...``), when it gives one;
            journaled with the answer, and reported by tracing as ``gen_ai.response.id``.
    """

    content: Blocks
    usage: Usage = msgspec.field(default_factory=Usage)
    stop_reason: str | None = None
    stop_details: dict[str, Any] | None = None
    response_id: str | None = None

    def as_message(self) -> Message:
        """The reply as an assistant message to append to the conversation.

        Returns:
            ``{"role": "assistant", "content": [...]}`` holding a deep copy of ``content``.
        """
        return {"role": "assistant", "content": deep_copy(self.content)}


class Model(Protocol):
    """What the runtime needs from a language model.

    ``name`` and ``params`` are pinned into a run's manifest when it starts and compared when it
    resumes, so ``params`` must be JSON-able and must not change between processes for the same
    configuration (no timestamps, object ids or unordered collections).

    A model that keeps the messages it is given from one call to the next (as ``ScriptedModel``
    with a script function does, to look at each message once) may say so with an attribute
    ``frozen_messages = True`` (of the class, or a property): the runtime then hands it the
    run's messages as read-only ``dict`` and ``list`` subclasses that raise ``TypeError`` when
    changed (the same objects at every call), so it can keep them as they are instead of
    copying each one.
    """

    @property
    def name(self) -> str:
        """The model's identifier, e.g. ``"claude-haiku-4-5"``."""
        ...

    @property
    def params(self) -> dict[str, Any]:
        """The settings that shape the model's answers, as a JSON-able dict."""
        ...

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        """Ask the model for the next assistant turn.

        Args:
            system: the system prompt: text, a list of text blocks (which may carry
                ``cache_control``), or ``None`` for none.
            messages: the conversation so far, Messages-API shaped. The list is the model's to
                keep, but the messages in it are the run's own: a model must not change them
                (copy one before changing it).
            tools: Anthropic tool definitions (``{"name", "description", "input_schema"}``),
                the same objects at every call of a run: like the messages, the run's own, which
                a model must not change.

        Returns:
            The assistant's reply.

        Raises:
            ModelError: the call failed for good (an adapter retries transient failures first).
            ModelResponseError: the answer is malformed; ``reason`` names the block and problem.

        Cancellation: the call is abandoned and the cancellation propagates. Nothing about an
        unfinished call is journaled, so a resumed run asks the model again.
        """
        ...


def check_reply_blocks(model_name: str, blocks: object) -> list[ContentBlock]:
    """Check that ``blocks`` is a list of assistant content blocks the runtime can use.

    Each block must be a dict with a string ``"type"``. The types in ``BLOCK_TYPES`` must carry
    their fields: ``text`` a string ``text``; ``tool_use`` a non-empty string ``id`` and ``name``
    and a dict ``input``; ``thinking`` string ``thinking`` and ``signature``; ``redacted_thinking``
    a string ``data``. A ``tool_use`` block may also carry ``input_error``, a string: the model
    wrote arguments that are not a JSON object (an adapter for an API whose arguments arrive as
    text sets it, with ``input`` empty, and says what was wrong), and the runtime answers the
    call with an error result instead of running it. ``tool_use`` ids must be unique within
    the reply. Blocks of other types
    (``server_tool_use``, ``web_search_tool_result``, types added later) are kept unchecked,
    and other keys are allowed and kept.

    Args:
        model_name: the model that produced the blocks, for the error.
        blocks: the candidate content.

    Returns:
        ``blocks`` itself, typed, when it is valid.

    Raises:
        ModelResponseError: the first problem found, naming the block's index and what is wrong.
    """
    if not isinstance(blocks, list):
        raise ModelResponseError(
            model_name, f"content must be a list of blocks, got {type(blocks).__name__}"
        )
    seen_ids: dict[str, int] = {}
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ModelResponseError(
                model_name, f"block {index}: must be an object, got {type(block).__name__}"
            )
        block_type = block.get("type")
        if not isinstance(block_type, str):
            raise ModelResponseError(model_name, f"block {index}: has no string 'type'")
        fields = _REQUIRED_FIELDS.get(block_type, ())
        for field, field_type in fields:
            value = block.get(field)
            if not isinstance(value, field_type):
                got = "missing" if field not in block else f"got {type(value).__name__}"
                raise ModelResponseError(
                    model_name,
                    f"block {index} ({block_type}): {field!r} must be "
                    f"{_JSON_NAMES[field_type]} ({got})",
                )
            if (block_type, field) in _NON_EMPTY and not value:
                raise ModelResponseError(
                    model_name, f"block {index} ({block_type}): {field!r} is empty"
                )
        if block_type == "tool_use":
            if "input_error" in block and not isinstance(block["input_error"], str):
                raise ModelResponseError(
                    model_name, f"block {index} (tool_use): 'input_error' must be a string"
                )
            call_id: str = block["id"]
            if call_id in seen_ids:
                raise ModelResponseError(
                    model_name,
                    f"block {index} (tool_use): id {call_id!r} is already used by block "
                    f"{seen_ids[call_id]}",
                )
            seen_ids[call_id] = index
    return blocks


@final
class StreamEnd:
    """The one rule for a streamed answer: it is an answer only once the provider said it ended.

    Each API ends an answer with signals of its own: the Messages API with ``message_stop``,
    the Responses API with a terminal ``response.*`` event, Chat Completions with a finish
    reason and then ``[DONE]``. An adapter names them (``StreamEnd(model, "message_stop")``),
    reports each one with ``saw`` as it arrives, and calls ``check`` when the stream has ended,
    before it makes anything of what it gathered. A stream can end without them and look whole
    to the SDK: a proxy's idle timeout, a load balancer draining or a server restart end an
    HTTP response cleanly. What was gathered is then a part of an answer: the text before a
    tool call the real answer made, a call's input cut anywhere (which may still be a valid
    object, missing only an optional field), no stop reason, and the usage the first event
    guessed. None of it is kept: ``check`` raises a transient ``ModelError``, carrying no
    usage, and the runtime asks again with backoff, as after a dropped connection.
    """

    def __init__(self, model: str, *signals: str) -> None:
        if not signals:
            raise ValueError("a stream ends with at least one signal")
        self._model = model
        self._signals = signals
        self._seen: set[str] = set()

    def saw(self, signal: str) -> None:
        """``signal`` arrived (one of those this end was made with).

        Raises:
            ValueError: ``signal`` is not one of them (a typo would make every answer fail).
        """
        if signal not in self._signals:
            raise ValueError(f"{signal!r} is none of {self._signals}")
        self._seen.add(signal)

    @property
    def missing(self) -> list[str]:
        """The signals that have not arrived, in the order the API sends them."""
        return [s for s in self._signals if s not in self._seen]

    def check(self) -> None:
        """Accept the stream as a whole answer, or refuse it.

        Raises:
            ModelError: (``transient``) a signal never arrived; the reason names it.
        """
        if missing := self.missing:
            raise ModelError(
                self._model,
                f"the stream ended before {' and '.join(missing)}: the answer is incomplete, "
                "and nothing of it is kept",
                transient=True,
            )
