"""``ScriptedModel``: a deterministic model for tests, demos and crash matrices.

The answer to a call is chosen by how many assistant messages the conversation already holds,
never by anything the object remembers. A fresh process that resumes a run from its journal
therefore gets exactly the answers the killed process would have got. What it does remember
(``_transcript``: each message's read-only copy, size and role, looked at once) only saves it
from walking the whole conversation at every call.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypedDict, final

import anyio.lowlevel

from .._errors import ModelResponseError
from ..journal import Usage
from ._base import ModelReply, SystemPrompt, check_reply_blocks, deep_copy
from ._messages import ContentBlock, Message, TextBlock, ToolDefinition, ToolUseBlock, tool_uses
from ._transcript import ToolsSize, Transcripts, request_size
from ._transcript import json_size as _json_size


class StoppedAnswer(TypedDict):
    """A script item whose answer stopped for a reason of its own (``ScriptedModel.stopped``)."""

    stop_reason: str
    content: str | list[ContentBlock]


ScriptedAnswer: TypeAlias = str | list[ContentBlock] | StoppedAnswer
"""One scripted answer: content blocks, a string as shorthand for one text block, or
``ScriptedModel.stopped(reason, blocks)`` for an answer with a stop reason of its own."""

ScriptFunction: TypeAlias = Callable[[list[Message]], ScriptedAnswer | Awaitable[ScriptedAnswer]]
"""Computes the answer from the conversation so far (sync or async)."""

UsageFunction: TypeAlias = Callable[[list[Message], list[ContentBlock]], Usage]
"""Computes a call's usage from ``(messages, reply_blocks)``."""


_ANSWERS = frozenset((list, str, dict))
"""What a script function returns when it answers at once (no awaitable to look for)."""


def _canonical_json(value: object) -> str:
    # Sorted keys and fixed separators: the same value gives the same text in every process.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _expand(answer: object, copy_with: Callable[[object], object] = copy.deepcopy) -> object:
    """Turn the string shorthand into its one text block; copy anything else.

    A script is copied with ``deepcopy`` once, when the model is made (so a value that is not
    JSON, such as a set, is kept and refused when served); answers a function computes at each
    call are copied the fast way.
    """
    if isinstance(answer, str):
        return [{"type": "text", "text": answer}]
    return copy_with(answer)


@final
class ScriptedModel:
    """A model that answers from a script instead of a network.

    Call ``i`` of a run (counted from 0) is the call made when ``messages`` holds ``i``
    assistant messages, and it gets ``responses[i]``. Because the position comes from the
    conversation, two instances given the same script and the same messages always answer
    alike, which is what a resumed run needs.

    Every answer goes through ``check_reply_blocks`` when it is served, so a script may hold
    a malformed answer on purpose to exercise the runtime's handling of ``ModelResponseError``.
    Answers are deep copies: changing a reply never changes the script.

    A call costs the same however long the conversation: each message is looked at (sized,
    and copied where a function of the caller's will read it) the first time a call sees it,
    and a conversation is recognised by the identity of its messages, which the runtime never
    changes once passed (see ``Model``); so are the tool definitions, whose size is kept for
    those of the last call (a caller who changes one in place must pass a new one). With a
    script function or a usage function it keeps read-only messages for them
    (``frozen_messages``): the runtime hands it read-only ones, which it keeps as they are; a
    message that is not read-only is copied once, when first seen. A list script with a fixed
    or the default usage hands messages to no code of the caller's, so it keeps no copies and
    asks for no read-only messages.

    Args:
        responses: the script. A sequence whose item ``i`` answers call ``i``, each item a
            list of content-block dicts or a string (shorthand for one text block); or a
            function (sync or async) taking ``messages`` and returning such an item. The
            function gets a new list of read-only messages (``dict`` and ``list`` subclasses
            that raise ``TypeError`` when changed; ``copy.deepcopy`` of one is a plain,
            changeable copy), so nothing it does reaches the run's messages.
        name: the model name pinned into a run's manifest.
        usage: the usage to report for every call, or a function of ``(messages, blocks)``
            (read-only messages, as a script function gets) returning it. By default it is
            estimated from sizes: a quarter of the length of the canonical JSON of
            ``system``, ``messages`` and ``tools`` for input and of the reply's blocks for
            output (at least 1 each), so budget tests are reproducible.

    Raises:
        TypeError: ``responses`` is a string, or a sequence that is not JSON-able.
    """

    def __init__(
        self,
        responses: Sequence[ScriptedAnswer] | ScriptFunction,
        *,
        name: str = "scripted",
        usage: Usage | UsageFunction | None = None,
    ) -> None:
        self._name = name
        self._usage = usage
        self._calls = 0
        # Copies only for code of the caller's that reads the conversation: a script function
        # or a usage function (a list script only counts and sizes the messages).
        self._copies = callable(responses) or callable(usage)
        self._transcripts = Transcripts(copies=self._copies)
        self._tools_size = ToolsSize()
        self._script: list[object] | None
        self._function: ScriptFunction | None
        if callable(responses):
            self._script = None
            self._function = responses
            self._params: dict[str, Any] = {"script": "callable"}
        elif isinstance(responses, str | bytes):
            raise TypeError("responses must be a sequence of answers or a function, not a string")
        else:
            self._script = [_expand(answer) for answer in responses]
            self._function = None
            digest = hashlib.sha256(_canonical_json(self._script).encode()).hexdigest()
            self._params = {"script_hash": digest, "responses": len(self._script)}

    @property
    def name(self) -> str:
        """The model name pinned into a run's manifest."""
        return self._name

    @property
    def frozen_messages(self) -> bool:
        """Whether this model keeps the messages it is given (read-only ones, which the runtime
        then hands it): with a script function or a usage function, which read them."""
        return self._copies

    @property
    def params(self) -> dict[str, Any]:
        """Describes the script: its SHA-256 and length, or ``{"script": "callable"}``.

        Equal scripts give equal params in every process, so a run resumed with a changed
        script is caught by the manifest check.
        """
        return dict(self._params)

    @property
    def calls(self) -> int:
        """How many calls this object has answered (failed calls are not counted)."""
        return self._calls

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self._name!r}, params={self._params!r})"

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        """Answer with the script's item for this point of the conversation.

        Args:
            system: the system prompt (only used for the default usage estimate).
            messages: the conversation so far; its assistant messages pick the answer.
            tools: the tool definitions (only used for the default usage estimate).

        Returns:
            The scripted reply; ``stop_reason`` is the item's own (``stopped``), else
            ``"tool_use"`` when it holds a ``tool_use`` block and ``"end_turn"`` otherwise.

        Raises:
            ModelResponseError: the script has no item for this call, or the item is malformed.

        Cancellation: the call yields once to the event loop, where it can be cancelled, and a
        script function that is async can be cancelled while it runs. A cancelled call serves
        nothing and is not counted.
        """
        await anyio.lowlevel.checkpoint()
        seen = self._transcripts.of(messages)
        # Taken now: an async script may await while another call moves the transcript on.
        index, size, count = seen.assistants, seen.size, len(seen.originals)
        copies = list(seen.frozen) if self._copies else []
        if self._script is not None:
            if index >= len(self._script):
                raise ModelResponseError(
                    self._name,
                    f"script has {len(self._script)} responses; call {index} (made after "
                    f"{index} assistant messages) has none",
                )
            answer = deep_copy(self._script[index])
        else:
            assert self._function is not None
            produced = self._function(copies)
            if type(produced) not in _ANSWERS and inspect.isawaitable(produced):
                produced = await produced
            answer = _expand(produced, deep_copy)
        stop_reason: str | None = None
        if isinstance(answer, dict) and "stop_reason" in answer:
            stop_reason, answer = answer["stop_reason"], _expand(answer.get("content"), deep_copy)
        blocks = check_reply_blocks(self._name, answer)
        seen_now = (copies, count, size)
        usage = self._usage_for(system=system, seen=seen_now, tools=tools, blocks=blocks)
        has_call = bool(tool_uses(blocks))
        if stop_reason is None:
            stop_reason = "tool_use" if has_call else "end_turn"
        if not has_call:  # the turn ends here: the run comes back only with a new message
            self._transcripts.forget(messages)
        self._calls += 1
        return ModelReply(content=blocks, usage=usage, stop_reason=stop_reason)

    def _usage_for(
        self,
        *,
        system: SystemPrompt,
        seen: tuple[list[Any], int, int],
        tools: list[ToolDefinition],
        blocks: list[ContentBlock],
    ) -> Usage:
        if isinstance(self._usage, Usage):
            return self._usage
        if self._usage is not None:
            return self._usage(list(seen[0]), deep_copy(blocks))
        _, count, messages_size = seen
        size = request_size(messages_size, count, system, self._tools_size(tools))
        return Usage(
            input_tokens=max(1, size // 4),
            output_tokens=max(1, _json_size(blocks) // 4),
        )

    @staticmethod
    def stopped(stop_reason: str, answer: str | list[ContentBlock]) -> StoppedAnswer:
        """A script item whose answer stopped for ``stop_reason`` (``"max_tokens"``,
        ``"pause_turn"``, ``"refusal"``, ...), to exercise what the runtime does with each.

        Args:
            stop_reason: the reason the reply reports.
            answer: its content blocks, or a string for one text block.

        Returns:
            ``{"stop_reason": stop_reason, "content": answer}``.
        """
        return {"stop_reason": stop_reason, "content": deep_copy(answer)}

    @staticmethod
    def text(text: str) -> TextBlock:
        """A ``text`` content block.

        Args:
            text: what the assistant says.

        Returns:
            ``{"type": "text", "text": text}``.
        """
        return {"type": "text", "text": text}

    @staticmethod
    def tool_use(id: str, name: str, input: Mapping[str, Any] | None = None) -> ToolUseBlock:
        """A ``tool_use`` content block.

        Args:
            id: the call's id, unique within the run (e.g. ``"toolu_1"``).
            name: the tool to call.
            input: the call's arguments (default: none).

        Returns:
            ``{"type": "tool_use", "id": id, "name": name, "input": {...}}`` with a copy of
            ``input``.
        """
        return {
            "type": "tool_use",
            "id": id,
            "name": name,
            "input": deep_copy(dict(input or {})),
        }
