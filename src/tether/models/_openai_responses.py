"""The run's conversation as a Responses API request, and a response back as content blocks.

Every request carries the whole conversation as ``input`` items (the journal is the run's
state, so nothing relies on ``previous_response_id`` or on what the server stored), with the
system prompt as ``instructions``. With ``store: false`` a request asks for the reasoning
items' ``encrypted_content`` (``include: ["reasoning.encrypted_content"]``) unless the params
say what to include: a server that stored nothing can read a reasoning item sent back only
from it, and refuses the next request of the run without it.

Requests. A user message's ``tool_result`` blocks become ``function_call_output`` items (by
``call_id``: the id the run journaled), first; the rest (text as ``input_text``, images as
``input_image``, PDFs as ``input_file``) follows as one user message. An assistant message
becomes, block by block: the output ``message`` items its text came from (text blocks that
carry an ``item_id`` are grouped back into their item, with ``annotations`` and ``phase``;
text without one is a plain assistant message), a ``function_call`` item per ``tool_use``
(with its ``item_id`` as the item's ``id``), and the opaque items as they came:
``openai_reasoning`` blocks (the API pairs a reasoning item with the item that followed it,
so both go back, in their order) and ``openai_item`` blocks (any other output item).

Answers. Each output item becomes blocks, in order: a ``message`` one ``text`` block per
``output_text`` part (``item_id``, and ``annotations`` and ``phase`` when present) and an
``openai_refusal`` block per refusal; a ``function_call`` a ``tool_use`` block (``id`` the
item's ``call_id``, renamed when an earlier call of the response has it, ``item_id`` its
``id``); a ``reasoning`` item ``{"type":
"openai_reasoning", "item": ...}``; any other item ``{"type": "openai_item", "item": ...}``.
The stop reason: ``refusal`` for a refusal or an answer cut off by the content filter,
``max_tokens`` for one cut off at ``max_output_tokens``, ``tool_use`` when there are calls,
else ``end_turn``. ``stop_details`` keeps the status, and why an incomplete answer stopped.
"""

from __future__ import annotations

from typing import Any

from ..journal import Usage
from ._base import ModelReply, SystemPrompt
from ._messages import (
    ContentBlock,
    Message,
    OpenAIRefusalBlock,
    TextBlock,
    ToolDefinition,
    ToolUseBlock,
    is_known,
    tool_uses,
)
from ._openai_translate import (
    NOT_SENT_BACK,
    Malformed,
    Untranslatable,
    arguments_text,
    blocks_of,
    data_url,
    distinct_ids,
    id_at,
    list_at,
    object_at,
    read_answer,
    response_id,
    result_text,
    search_result_text,
    system_text,
    text_at,
    tool_function,
    tool_use,
    wrong,
)

RESERVED_PARAMS = frozenset(
    {"input", "instructions", "tools", "stream", "previous_response_id", "conversation"}
)
"""``responses.create`` arguments the model supplies itself, or that would have the server
hold the conversation the journal already holds."""

ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""What ``include`` asks for when nothing is stored: the reasoning items, sealed."""

REASONING_KEYS = frozenset({"type", "id", "summary", "content", "encrypted_content", "status"})
"""The fields of a reasoning item that go back in a request (its input type's)."""


def request(
    model: str,
    system: SystemPrompt,
    messages: list[Message],
    tools: list[ToolDefinition],
    params: dict[str, Any],
    *,
    stream: bool,
) -> dict[str, Any]:
    """The keyword arguments of one ``responses.create`` call.

    Raises:
        Untranslatable: the conversation holds a block the API cannot take.
    """
    body: dict[str, Any] = {"model": model, "input": input_items(messages)}
    instructions = system_text(system)
    if instructions is not None:
        body["instructions"] = instructions
    if tools:
        # strict: the Responses API makes function tools strict unless told otherwise, and a
        # strict schema must list every property as required, which a tool's need not.
        body["tools"] = [{"type": "function", **tool_function(t), "strict": False} for t in tools]
    body.update(params)
    if params.get("store") is False and "include" not in params:
        body["include"] = [ENCRYPTED_REASONING]
    if stream:
        body["stream"] = True
    return body


def input_items(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Responses input items (see the module doc)."""
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        blocks = blocks_of(message, index)
        if role == "user":
            items.extend(_user(blocks, index, message.get("content")))
        elif role == "assistant":
            items.extend(_assistant(blocks, index))
        else:
            raise Untranslatable(f"messages.{index}.role: {role!r} is neither user nor assistant")
    return items


def _user(blocks: list[ContentBlock], index: int, content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    items: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"messages.{index}.content.{j}"
        if is_known(block) and block["type"] == "tool_result":
            text, media = result_text(block)
            output: str | list[dict[str, Any]] = text
            if media:
                output = [{"type": "input_text", "text": text}] if text else []
                output += [_part(m, f"{where}.content") for m in media]
            call_id = block.get("tool_use_id")
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        else:
            parts.append(_part(block, where))
    if parts:
        items.append({"role": "user", "content": parts})
    return items


def _part(block: ContentBlock, where: str) -> dict[str, Any]:
    if is_known(block):
        if block["type"] == "text":
            return {"type": "input_text", "text": str(block.get("text", ""))}
        if block["type"] == "search_result":
            return {"type": "input_text", "text": search_result_text(block)}
        if block["type"] == "image":
            return {"type": "input_image", "image_url": data_url(block, where), "detail": "auto"}
        if block["type"] == "document":
            source: object = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                return {"type": "input_text", "text": str(source.get("data", ""))}
            if isinstance(source, dict) and source.get("type") == "url":
                return {"type": "input_file", "file_url": data_url(block, where)}
            name = str(block.get("title") or "document.pdf")
            return {"type": "input_file", "file_data": data_url(block, where), "filename": name}
    kind = block.get("type")
    raise Untranslatable(f"{where}: the Responses API has no counterpart for a {kind!r} block")


def _assistant(blocks: list[ContentBlock], index: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if not is_known(block):
            raise Untranslatable(
                f"messages.{index}.content.{j}: the Responses API has no counterpart for an "
                f"assistant {block.get('type')!r} block"
            )
        if block["type"] in ("text", "openai_refusal") and isinstance(block.get("item_id"), str):
            _add_output_part(items, block)
        elif block["type"] == "text":
            items.append({"role": "assistant", "content": str(block.get("text", ""))})
        elif block["type"] == "tool_use":
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": block.get("id"),
                "name": block.get("name"),
                "arguments": arguments_text(block),
            }
            if isinstance(block.get("item_id"), str):
                call["id"] = block["item_id"]
            items.append(call)
        elif block["type"] == "openai_reasoning" and isinstance(block.get("item"), dict):
            items.append({k: v for k, v in block["item"].items() if k in REASONING_KEYS})
        elif block["type"] == "openai_item" and isinstance(block.get("item"), dict):
            items.append(dict(block["item"]))
        elif block["type"] not in NOT_SENT_BACK and block["type"] != "openai_refusal":
            raise Untranslatable(
                f"messages.{index}.content.{j}: the Responses API has no counterpart for an "
                f"assistant {block['type']!r} block"
            )
    return items


def _add_output_part(items: list[dict[str, Any]], block: TextBlock | OpenAIRefusalBlock) -> None:
    """Put a text or refusal block that came in output item ``block["item_id"]`` back in it:
    in the item ``items`` ends with when it is that one, else in a new one."""
    item_id = block.get("item_id")
    part: dict[str, Any]
    if block["type"] == "openai_refusal":
        part = {"type": "refusal", "refusal": str(block.get("refusal", ""))}
    else:
        annotations = list(block.get("annotations") or [])
        part = {
            "type": "output_text",
            "text": str(block.get("text", "")),
            "annotations": annotations,
        }
    last = items[-1] if items else {}
    if last.get("type") == "message" and last.get("id") == item_id:
        last["content"].append(part)
        return
    message: dict[str, Any] = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }
    if isinstance(block.get("phase"), str):
        message["phase"] = block["phase"]
    items.append(message)


# -- answers ----------------------------------------------------------------------------------


def reply(model: str, response: dict[str, Any]) -> ModelReply:
    """A Responses API response (as plain JSON, its status not ``failed``) as the runtime's
    reply; the blocks are not yet checked (``check_reply_blocks``).

    Raises:
        ModelResponseError: the response has no output list, a function call has no name or
            call id, or a field holds a value of a type the API never sends there
            (``Malformed``: the reason names the field).
    """
    return read_answer(model, response, _answer, prompt="input_tokens", output="output_tokens")


def _answer(response: dict[str, Any], tokens: Usage) -> ModelReply:
    if response.get("output") is None:
        raise Malformed("the response has no output list")
    blocks: list[ContentBlock] = []
    for n, item in enumerate(list_at(response.get("output"), "output")):
        where = f"output.{n}"
        fields = object_at(item, where, required=True)
        kind = fields.get("type")
        if kind == "message":
            blocks.extend(_message_blocks(fields, where))
        elif kind == "function_call":
            blocks.append(_function_call(fields, where))
        elif kind == "reasoning":
            blocks.append({"type": "openai_reasoning", "item": fields})
        else:
            blocks.append({"type": "openai_item", "item": fields})
    distinct_ids(blocks)
    status = text_at(response.get("status"), "status")
    incomplete = object_at(response.get("incomplete_details"), "incomplete_details")
    reason = text_at(incomplete.get("reason"), "incomplete_details.reason")
    details: dict[str, Any] = {"status": status}
    if reason is not None:
        details["incomplete_reason"] = reason
    return ModelReply(
        content=blocks,
        usage=tokens,
        stop_reason=_stop_reason(status, reason, blocks),
        stop_details=details if status is not None else None,
        response_id=response_id(response),
    )


def _function_call(item: dict[str, Any], where: str) -> ToolUseBlock:
    """The ``tool_use`` block of a ``function_call`` output item.

    Raises:
        Malformed: it has no name or call id, or they or its id are not text.
    """
    name = text_at(item.get("name"), f"{where}.name")
    call_id = id_at(item.get("call_id"), f"{where}.call_id")
    if not name or not call_id:
        raise Malformed(f"{where} (function_call): no name or call_id")
    item_id = text_at(item.get("id"), f"{where}.id")
    return tool_use(call_id, name, item.get("arguments"), item_id=item_id)


def _message_blocks(item: dict[str, Any], where: str) -> list[ContentBlock]:
    """The blocks of a ``message`` output item: its text and refusal parts, in order.

    Raises:
        Malformed: its content is not an array of parts, or a field of it is not of its type.
    """
    blocks: list[ContentBlock] = []
    item_id = text_at(item.get("id"), f"{where}.id")
    phase = text_at(item.get("phase"), f"{where}.phase")
    for j, part in enumerate(list_at(item.get("content"), f"{where}.content")):
        at = f"{where}.content.{j}"
        fields = object_at(part, at, required=True)
        kind = fields.get("type")
        block: TextBlock | OpenAIRefusalBlock
        if kind == "output_text":
            block = {"type": "text", "text": _text(fields.get("text"), f"{at}.text")}
            annotations = list_at(fields.get("annotations"), f"{at}.annotations")
            if annotations:
                block["annotations"] = annotations
        elif kind == "refusal":
            block = {
                "type": "openai_refusal",
                "refusal": _text(fields.get("refusal"), f"{at}.refusal"),
            }
        else:
            continue
        if item_id is not None:
            block["item_id"] = item_id
        if phase is not None:
            block["phase"] = phase
        blocks.append(block)
    return blocks


def _text(value: object, where: str) -> str:
    """The text a part must hold.

    Raises:
        Malformed: it holds none, or something else.
    """
    if not isinstance(value, str):
        raise wrong(where, "a string", value)
    return value


def _stop_reason(status: object, reason: object, blocks: list[ContentBlock]) -> str | None:
    if reason == "content_filter" or any(
        is_known(b) and b["type"] == "openai_refusal" for b in blocks
    ):
        return "refusal"
    if status == "incomplete" and reason == "max_output_tokens":
        return "max_tokens"
    if tool_uses(blocks):
        return "tool_use"
    if status == "incomplete" and isinstance(reason, str):
        return reason
    return "end_turn"
