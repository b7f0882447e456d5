"""What the Chat Completions and Responses translations share: the run's conversation is
Anthropic-shaped, and both OpenAI APIs take some of its pieces the same way.

- The system prompt is text (a list of text blocks is joined, one blank line apart; their
  ``cache_control`` has no counterpart and is dropped, as it is everywhere else).
- A tool result is text the model reads, prefixed ``error: `` when the call failed (neither API
  has an error flag); images and documents in it are sent beside it, as the API allows.
- A call's arguments arrive as text and are parsed here into the ``tool_use`` block's
  ``input``; text that is not one JSON object gives the block ``input_error`` instead (the
  runtime answers that call with an error result and does not run it), and such a call goes
  back to the API with ``{}`` as its arguments, since some servers parse what they are sent.
- A call's id is the server's. A compatible server may give two calls of one answer the same
  id (or none); the later ones are renamed here (``call_0-2``), so the answer's ids are
  distinct, and the runtime renames any id an earlier turn of the run used.
- Tokens: OpenAI counts cached input inside the prompt's tokens; ``Usage`` keeps them apart.
- An answer is read field by field: a field the API defines that holds a value of another type
  (``"usage": "lots"``, a streamed ``delta`` that is a string, a call's ``index`` that is not
  a number) is ``Malformed``, naming the field by its path (``usage.prompt_tokens_details``),
  and ``OpenAIModel`` raises it as the ``ModelResponseError`` of a malformed answer. Fields
  some compatible servers add (``reasoning_content``) are read only when they are text.

Nothing here imports the SDK: the translations work on plain JSON values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._errors import ModelResponseError
from ..journal import Usage
from ._base import ModelReply, SystemPrompt
from ._messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    SearchResultBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    is_known,
    tool_uses,
)

ARGUMENT_ECHO = 300
"""Characters of unreadable arguments quoted back to the model in the call's error result."""

NOT_SENT_BACK = frozenset({"thinking", "redacted_thinking", "openai_reasoning_content"})
"""Assistant block types with no counterpart in a request: reasoning another API (or a
compatible server's extension) produced. They stay in the journal, for people to read."""


class Untranslatable(ValueError):
    """The conversation holds something the chosen API cannot take; says what and where."""


class Malformed(Exception):
    """A field of an answer is missing or holds a value of a type the API never gives it; the
    message names the field (its path in the answer) and what it held."""


_SHOWN = 40
"""Characters of a wrongly-typed value quoted in the ``Malformed`` message that names it."""


def _kind(value: object) -> str:
    """What a JSON value is, in words: ``a string``, ``a number``, ``an array``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def wrong(where: str, expected: str, value: object) -> Malformed:
    """``Malformed``: the field at ``where`` must be ``expected`` but holds ``value``."""
    if value is None:
        return Malformed(f"{where} must be {expected}, not null or missing")
    shown = repr(value)
    if len(shown) > _SHOWN:
        shown = f"{shown[:_SHOWN]}..."
    return Malformed(f"{where} must be {expected}, not {_kind(value)} ({shown})")


def object_at(value: object, where: str, *, required: bool = False) -> dict[str, Any]:
    """``value``, a JSON object; an absent field (``None``) is an empty one, unless it is
    ``required`` (an entry of an array, a choice's ``message``).

    Raises:
        Malformed: ``value`` is something else.
    """
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise wrong(where, "an object", value)
    return value


def list_at(value: object, where: str) -> list[Any]:
    """``value``, a JSON array; an absent field (``None``) is an empty one.

    Raises:
        Malformed: ``value`` is something else.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong(where, "an array", value)
    return value


def text_at(value: object, where: str) -> str | None:
    """``value``, a string, or ``None`` for an absent field.

    Raises:
        Malformed: ``value`` is something else.
    """
    if value is not None and not isinstance(value, str):
        raise wrong(where, "a string", value)
    return value


def integer_at(value: object, where: str) -> int | None:
    """``value``, an integer (``true`` is not one; ``12.0`` is, as some servers write their
    counts), or ``None`` for an absent field.

    Raises:
        Malformed: ``value`` is something else.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise wrong(where, "an integer", value)
    return value


def id_at(value: object, where: str) -> str | None:
    """``value``, an id: a string, or an integer some servers send (as its digits), or
    ``None`` for an absent field. (A call id is checked, and renamed if need be, later.)

    Raises:
        Malformed: ``value`` is something else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return text_at(value, where)


def system_text(system: SystemPrompt) -> str | None:
    """The system prompt as one text, or ``None`` when there is none."""
    if system is None:
        return None
    if isinstance(system, str):
        return system or None
    texts = [str(block.get("text", "")) for block in system]
    return "\n\n".join(t for t in texts if t) or None


def blocks_of(message: Message, index: int) -> list[ContentBlock]:
    """A message's content as a list of blocks (a string is one text block).

    Raises:
        Untranslatable: the content is neither (a journal holds what it was given).
    """
    content: object = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise Untranslatable(f"messages.{index}.content: expected a string or a list of blocks")


def tool_function(tool: ToolDefinition) -> dict[str, Any]:
    """An Anthropic tool definition's name, description and JSON schema, OpenAI-named."""
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
    return function


def tool_use(
    call_id: str, name: str, arguments: object, *, item_id: str | None = None
) -> ToolUseBlock:
    """A ``tool_use`` block for a call whose arguments came as ``arguments`` (text), in the
    output item ``item_id`` (the Responses API's).

    Empty text is no arguments (``{}``); text that is not one JSON object leaves ``input``
    empty and says why in ``input_error``.
    """
    block: ToolUseBlock = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    if not isinstance(arguments, str):
        block["input_error"] = f"the arguments are not text but {type(arguments).__name__}"
    elif arguments.strip():
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            block["input_error"] = f"they are not valid JSON ({exc}): {_echo(arguments)}"
        else:
            if isinstance(parsed, dict):
                block["input"] = parsed
            else:
                block["input_error"] = (
                    f"they are JSON but not an object ({type(parsed).__name__}): {_echo(arguments)}"
                )
    if item_id is not None:
        block["item_id"] = item_id
    return block


def distinct_ids(blocks: list[ContentBlock]) -> None:
    """Rename, in place, a ``tool_use`` block whose id an earlier block of the same answer has
    (``call_0`` twice becomes ``call_0`` and ``call_0-2``), never to an id the answer uses."""
    uses = tool_uses(blocks)
    taken = {b["id"] for b in uses}
    seen: set[str] = set()
    for block in uses:
        call_id = block["id"]
        if call_id in seen:
            n = 2
            while f"{call_id}-{n}" in taken:
                n += 1
            block["id"] = f"{call_id}-{n}"
            taken.add(block["id"])
        seen.add(block["id"])


def _echo(text: str) -> str:
    if len(text) <= ARGUMENT_ECHO:
        return repr(text)
    return f"{text[:ARGUMENT_ECHO]!r}... ({len(text)} characters)"


def arguments_text(block: ToolUseBlock) -> str:
    """The arguments of a journaled ``tool_use`` block as the API takes them back."""
    if "input_error" in block:
        return "{}"
    return json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))


def result_text(block: ToolResultBlock) -> tuple[str, list[ContentBlock]]:
    """A ``tool_result`` block as the text the model reads and the other blocks in it
    (images, documents) to be sent beside it."""
    content = block.get("content")
    media: list[ContentBlock] = []
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if is_known(part) and part["type"] == "text":
                texts.append(str(part.get("text", "")))
            elif is_known(part) and part["type"] == "search_result":
                texts.append(search_result_text(part))
            else:
                media.append(part)
        text = "\n\n".join(texts)
    else:
        text = json.dumps(content, ensure_ascii=False)
    if block.get("is_error"):
        text = f"error: {text}"
    return text, media


def search_result_text(block: SearchResultBlock) -> str:
    """A ``search_result`` block (title, source and text content) as plain text."""
    lines = [str(block.get("title", "")), str(block.get("source", ""))]
    parts: object = block.get("content") or []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and part.get("type") == "text":
            lines.append(str(part.get("text", "")))
    return "\n".join(line for line in lines if line)


def data_url(block: ImageBlock | DocumentBlock, where: str) -> str:
    """The URL of an image or document block's source: its own for a ``url`` source, a
    ``data:`` URL for a ``base64`` one.

    Raises:
        Untranslatable: any other source, or none.
    """
    source: object = block.get("source")
    if isinstance(source, dict):
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            media_type = source.get("media_type", "application/octet-stream")
            return f"data:{media_type};base64,{source['data']}"
    kind = source.get("type") if isinstance(source, dict) else None
    raise Untranslatable(f"{where}: a {block.get('type')} block with a {kind!r} source")


def read_answer(
    model: str,
    answer: dict[str, Any],
    read: Callable[[dict[str, Any], Usage], ModelReply],
    *,
    prompt: str,
    output: str,
) -> ModelReply:
    """The reply ``read`` makes of ``answer`` and the usage it holds (``usage_of``).

    Raises:
        ModelResponseError: a field of the answer is ``Malformed``, carrying the usage when
            that could be read (the tokens were spent all the same).
    """
    try:
        tokens = usage_of(answer.get("usage"), prompt=prompt, output=output)
    except Malformed as exc:
        raise ModelResponseError(model, str(exc)) from exc
    try:
        return read(answer, tokens)
    except Malformed as exc:
        raise ModelResponseError(model, str(exc), usage=tokens) from exc


def response_id(answer: dict[str, Any]) -> str | None:
    """The answer's ``id`` (``chatcmpl-...``, ``resp_...``), when it is text: journaled with
    the answer and reported by tracing, never read by the run, so one of another type is
    dropped, not refused (as ``AnthropicModel`` does)."""
    given = answer.get("id")
    return given if isinstance(given, str) and given else None


def usage_of(counted: object, *, prompt: str, output: str) -> Usage:
    """``Usage`` from an answer's ``usage`` object, whose counts are named ``prompt`` and
    ``output`` (``prompt_tokens`` and ``completion_tokens`` in Chat Completions,
    ``input_tokens`` and ``output_tokens`` in the Responses API), each with its ``_details``.

    Raises:
        Malformed: ``usage``, a count or one of the details is not of its type.
    """
    fields = object_at(counted, "usage")
    asked = object_at(fields.get(f"{prompt}_details"), f"usage.{prompt}_details")
    said = object_at(fields.get(f"{output}_details"), f"usage.{output}_details")
    return usage(
        prompt=integer_at(fields.get(prompt), f"usage.{prompt}"),
        cached=integer_at(asked.get("cached_tokens"), f"usage.{prompt}_details.cached_tokens"),
        written=integer_at(
            asked.get("cache_write_tokens"), f"usage.{prompt}_details.cache_write_tokens"
        ),
        output=integer_at(fields.get(output), f"usage.{output}"),
        reasoning=integer_at(
            said.get("reasoning_tokens"), f"usage.{output}_details.reasoning_tokens"
        ),
    )


def usage(
    *,
    prompt: object,
    cached: object = 0,
    written: object = 0,
    output: object = 0,
    reasoning: object = 0,
) -> Usage:
    """``Usage`` from OpenAI's counts, where the prompt's tokens include the cached ones."""

    def count(value: object) -> int:
        return value if isinstance(value, int) and value > 0 else 0

    read, write = count(cached), count(written)
    return Usage(
        input_tokens=max(0, count(prompt) - read - write),
        output_tokens=count(output),
        cache_creation_input_tokens=write,
        cache_read_input_tokens=read,
        reasoning_tokens=count(reasoning),
    )
