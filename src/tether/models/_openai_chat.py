"""The run's conversation as a Chat Completions request, and an answer back as content blocks.

Requests. The system prompt is the first message (``role: system``). A user message's
``tool_result`` blocks become ``role: tool`` messages, first and in order (the API wants
them right after the assistant message whose ``tool_calls`` they answer, ``tool_call_id``
equal to the call's ``id``: the id the run journaled, renamed or not); the rest of the
message (text, images as ``image_url``, PDFs as ``file``) follows as one ``role: user``
message, led by the images and documents that tool results held (a tool message takes text
only). An assistant message is its text as ``content`` and its calls as ``tool_calls``
(``type: function``, the arguments as JSON text); reasoning blocks are not sent back.

Answers. ``choices[0].message`` becomes blocks in this order: ``openai_reasoning_content``
(the ``reasoning_content`` or ``reasoning`` text some compatible servers add), ``text``,
``openai_refusal`` (``{"refusal": ...}``), then one ``tool_use`` per tool call (a call
without an id, as some servers send, is numbered ``call_N`` by its place, and a repeated id
is renamed: ``distinct_ids``). The stop reason is
the runtime's: ``refusal`` when the model refused or ``finish_reason`` is ``content_filter``,
``max_tokens`` for ``length``, ``tool_use`` when there are calls, ``end_turn`` for ``stop``;
any other finish reason is kept as it is. ``stop_details`` keeps ``finish_reason`` as sent.
A choice without a ``message`` object, and a field of a type the API never sends there, make
the answer malformed (``Malformed``, naming the field: ``choices.0.message.content``).

Streams. A streamed answer is ``data:`` events of ``chat.completion.chunk`` objects
(``EventData`` reads them off the response's bytes, as the SSE rules dispatch them), rebuilt
by ``StreamedAnswer``; it is whole once a chunk gave the finish reason and ``[DONE]`` followed
(with ``stream_options.include_usage``, the chunk with the usage comes between them).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..journal import Usage
from ._base import ModelReply, SystemPrompt
from ._messages import ContentBlock, Message, ToolDefinition, ToolUseBlock, is_known, tool_uses
from ._openai_translate import (
    NOT_SENT_BACK,
    Malformed,
    Untranslatable,
    arguments_text,
    blocks_of,
    data_url,
    distinct_ids,
    id_at,
    integer_at,
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

RESERVED_PARAMS = frozenset({"messages", "tools", "stream", "n", "functions", "function_call"})
"""``chat.completions.create`` arguments the model supplies itself or cannot honour (``n``:
one answer per call; ``functions``: the deprecated form of ``tools``)."""


def request(
    model: str,
    system: SystemPrompt,
    messages: list[Message],
    tools: list[ToolDefinition],
    params: dict[str, Any],
    *,
    stream: bool,
) -> dict[str, Any]:
    """The keyword arguments of one ``chat.completions.create`` call.

    Raises:
        Untranslatable: the conversation holds a block the API cannot take.
    """
    body: dict[str, Any] = {"model": model, "messages": chat_messages(system, messages)}
    if tools:
        body["tools"] = [{"type": "function", "function": tool_function(t)} for t in tools]
    body.update(params)
    if stream:
        body["stream"] = True
        body.setdefault("stream_options", {"include_usage": True})
    else:
        body.pop("stream_options", None)  # the API refuses it without streaming
    return body


def chat_messages(system: SystemPrompt, messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages (see the module doc)."""
    out: list[dict[str, Any]] = []
    text = system_text(system)
    if text is not None:
        out.append({"role": "system", "content": text})
    for index, message in enumerate(messages):
        role = message.get("role")
        blocks = blocks_of(message, index)
        if role == "user":
            out.extend(_user(blocks, index, message.get("content")))
        elif role == "assistant":
            out.append(_assistant(blocks, index))
        else:
            raise Untranslatable(f"messages.{index}.role: {role!r} is neither user nor assistant")
    return out


def _user(blocks: list[ContentBlock], index: int, content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"messages.{index}.content.{j}"
        if is_known(block) and block["type"] == "tool_result":
            text, media = result_text(block)
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
            if media:
                note = f"(the images and documents of the result of {block.get('tool_use_id')})"
                parts.append({"type": "text", "text": note})
                parts.extend(_part(m, f"{where}.content") for m in media)
        else:
            parts.append(_part(block, where))
    if parts:
        if len(parts) == 1 and parts[0]["type"] == "text":
            out.append({"role": "user", "content": parts[0]["text"]})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _part(block: ContentBlock, where: str) -> dict[str, Any]:
    if is_known(block):
        if block["type"] == "text":
            return {"type": "text", "text": str(block.get("text", ""))}
        if block["type"] == "search_result":
            return {"type": "text", "text": search_result_text(block)}
        if block["type"] == "image":
            return {"type": "image_url", "image_url": {"url": data_url(block, where)}}
        if block["type"] == "document":
            source: object = block.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                return {"type": "text", "text": str(source.get("data", ""))}
            if isinstance(source, dict) and source.get("type") == "base64":
                name = str(block.get("title") or "document.pdf")
                file = {"file_data": data_url(block, where), "filename": name}
                return {"type": "file", "file": file}
            kind_of = source.get("type") if isinstance(source, dict) else None
            raise Untranslatable(f"{where}: Chat Completions takes no {kind_of!r} document source")
    kind = block.get("type")
    raise Untranslatable(f"{where}: Chat Completions has no counterpart for a {kind!r} block")


def _assistant(blocks: list[ContentBlock], index: int) -> dict[str, Any]:
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if is_known(block) and block["type"] == "text":
            texts.append(str(block.get("text", "")))
        elif is_known(block) and block["type"] == "tool_use":
            function = {"name": block.get("name"), "arguments": arguments_text(block)}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif is_known(block) and block["type"] == "openai_refusal":
            refusals.append(str(block.get("refusal", "")))
        elif (kind := block.get("type")) not in NOT_SENT_BACK:
            raise Untranslatable(
                f"messages.{index}.content.{j}: Chat Completions has no counterpart for an "
                f"assistant {kind!r} block"
            )
    message: dict[str, Any] = {"role": "assistant"}
    if texts or not (calls or refusals):
        message["content"] = "\n\n".join(texts)
    if refusals:
        message["refusal"] = "\n\n".join(refusals)
    if calls:
        message["tool_calls"] = calls
    return message


# -- answers ----------------------------------------------------------------------------------


def reply(model: str, completion: dict[str, Any]) -> ModelReply:
    """A Chat Completions answer (as plain JSON) as the runtime's reply; the blocks are not yet
    checked (``check_reply_blocks``).

    Raises:
        ModelResponseError: the answer has no choice or message, a tool call has no function
            name, or a field holds a value of a type the API never sends there (``Malformed``:
            the reason names the field).
    """
    return read_answer(
        model, completion, _answer, prompt="prompt_tokens", output="completion_tokens"
    )


def _answer(completion: dict[str, Any], tokens: Usage) -> ModelReply:
    choices = list_at(completion.get("choices"), "choices")
    if not choices:
        raise Malformed("the answer has no choices")
    choice = object_at(choices[0], "choices.0", required=True)
    message = object_at(choice.get("message"), "choices.0.message", required=True)
    blocks: list[ContentBlock] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:  # a server's own field: read only when text
        blocks.append({"type": "openai_reasoning_content", "text": reasoning})
    content = _content_text(message.get("content"), "choices.0.message.content")
    if content:
        blocks.append({"type": "text", "text": content})
    refusal = text_at(message.get("refusal"), "choices.0.message.refusal")
    if refusal:
        blocks.append({"type": "openai_refusal", "refusal": refusal})
    calls = list_at(message.get("tool_calls"), "choices.0.message.tool_calls")
    blocks.extend(
        _call(call, f"choices.0.message.tool_calls.{n}", n) for n, call in enumerate(calls)
    )
    distinct_ids(blocks)
    finish = text_at(choice.get("finish_reason"), "choices.0.finish_reason")
    return ModelReply(
        content=blocks,
        usage=tokens,
        stop_reason=_stop_reason(finish, blocks),
        stop_details={"finish_reason": finish} if finish is not None else None,
        response_id=response_id(completion),
    )


def _content_text(content: object, where: str) -> str:
    """A message's ``content`` as text: a string, or the text of its parts (some servers send
    content parts), or none.

    Raises:
        Malformed: it is neither, or a part is not an object with text.
    """
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise wrong(where, "a string or an array of content parts", content)
    texts: list[str] = []
    for j, part in enumerate(content):
        text = text_at(
            object_at(part, f"{where}.{j}", required=True).get("text"), f"{where}.{j}.text"
        )
        texts.append(text or "")
    return "".join(texts)


def _call(call: object, where: str, n: int) -> ToolUseBlock:
    """The ``tool_use`` block of tool call ``n`` of the answer (a call without an id is
    ``call_N``).

    Raises:
        Malformed: the call, its function or a field of them is not of its type, or the
            function has no name.
    """
    fields = object_at(call, where, required=True)
    function = object_at(fields.get("function"), f"{where}.function")
    name = text_at(function.get("name"), f"{where}.function.name")
    if not name:
        raise Malformed(f"{where}: no function name")
    call_id = id_at(fields.get("id"), f"{where}.id") or f"call_{n}"
    return tool_use(call_id, name, function.get("arguments"))


def _stop_reason(finish: object, blocks: list[ContentBlock]) -> str | None:
    if finish == "content_filter" or any(
        is_known(b) and b["type"] == "openai_refusal" for b in blocks
    ):
        return "refusal"
    if finish == "length":
        return "max_tokens"
    if tool_uses(blocks):
        return "tool_use"
    if finish in ("stop", "tool_calls", "function_call", None):
        return "end_turn"
    return str(finish)


FINISHED = "a finish reason"
DONE = "[DONE]"
"""The two signals that end a streamed answer (``StreamEnd``), in the order they come."""


class EventData:
    """Reads the data of server-sent events off a response's bytes, fed as they arrive.

    As the SSE rules say: lines end with CR LF, LF or CR (and only those: the splitting of
    text lines also breaks at U+2028 and the like, which JSON leaves raw inside a string); an
    event's ``data:`` lines are joined at the blank line that ends it; comments, other fields
    and events without data are skipped; and an event the stream ends in the middle of is
    never given out, nor is the unfinished line it ends in decoded.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._after_cr = False  # the last chunk ended with a CR: the next may begin with its LF

    def feed(self, chunk: bytes) -> list[str]:
        """The data of each event ``chunk`` ended, in order.

        Raises:
            UnicodeDecodeError: a whole line is not UTF-8.
        """
        if chunk:
            if self._after_cr and chunk.startswith(b"\n"):
                chunk = chunk[1:]  # the second half of a CR LF, whose CR ended a line already
            self._after_cr = False
        self._buffer += chunk
        ended: list[str] = []
        while (end := _LINE_END.search(self._buffer)) is not None:
            line, self._buffer = self._buffer[: end.start()], self._buffer[end.end() :]
            self._after_cr = not self._buffer and end.group() == b"\r"
            data = self._line(line.decode("utf-8"))
            if data:
                ended.append(data)
        return ended

    def _line(self, line: str) -> str | None:
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value.removeprefix(" "))
            return None
        data, self._data = "\n".join(self._data), []
        return data


_LINE_END = re.compile(rb"\r\n|\r|\n")


class StreamedAnswer:
    """Rebuilds a Chat Completions answer from its streamed chunks (as plain JSON)."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._chunks = 0
        self._id: str | None = None

    @property
    def finished(self) -> bool:
        """Whether a chunk said why the answer ended."""
        return self._finish is not None

    def add(self, chunk: dict[str, Any]) -> str:
        """Take one chunk; returns the answer text it added (for people watching).

        Raises:
            Malformed: a field of the chunk holds a value of a type the API never sends there;
                the message names the chunk (counted from 1) and the field.
        """
        self._chunks += 1
        try:
            return self._add(chunk)
        except Malformed as exc:
            raise Malformed(f"streamed chunk {self._chunks}: {exc}") from exc

    def _add(self, chunk: dict[str, Any]) -> str:
        if self._id is None:
            self._id = response_id(chunk)  # every chunk of a stream carries the answer's id
        if chunk.get("usage") is not None:
            self._usage = object_at(chunk["usage"], "usage")
        added = ""
        for i, choice in enumerate(list_at(chunk.get("choices"), "choices")):
            where = f"choices.{i}"
            fields = object_at(choice, where, required=True)
            if integer_at(fields.get("index"), f"{where}.index") not in (0, None):
                continue
            delta = object_at(fields.get("delta"), f"{where}.delta")
            content = text_at(delta.get("content"), f"{where}.delta.content")
            if content is not None:
                added = content
                self._content.append(content)
            refusal = text_at(delta.get("refusal"), f"{where}.delta.refusal")
            if refusal is not None:
                self._refusal.append(refusal)
            for key in ("reasoning_content", "reasoning"):  # a server's own: read when text
                if isinstance(delta.get(key), str):
                    self._reasoning.append(delta[key])
            pieces = list_at(delta.get("tool_calls"), f"{where}.delta.tool_calls")
            for j, piece in enumerate(pieces):
                self._add_call(piece, f"{where}.delta.tool_calls.{j}")
            finish = text_at(fields.get("finish_reason"), f"{where}.finish_reason")
            if finish is not None:
                self._finish = finish
        return added

    def _add_call(self, piece: object, where: str) -> None:
        fields = object_at(piece, where, required=True)
        index = integer_at(fields.get("index"), f"{where}.index")
        call = self._calls.setdefault(
            len(self._calls) if index is None else index,
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        call_id = id_at(fields.get("id"), f"{where}.id")
        if call_id and not call["id"]:
            call["id"] = call_id
        function = object_at(fields.get("function"), f"{where}.function")
        name = text_at(function.get("name"), f"{where}.function.name")
        if name and not call["function"]["name"]:
            call["function"]["name"] = name  # sent whole, in the call's first piece
        given = function.get("arguments")
        if isinstance(given, dict):  # an object, not its JSON text: as a whole answer's is read
            given = json.dumps(given)
        arguments = text_at(given, f"{where}.function.arguments")
        if arguments is not None:
            call["function"]["arguments"] += arguments

    def completion(self) -> dict[str, Any]:
        """The whole answer, shaped like a non-streamed one."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        completion: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}]
        }
        if self._usage is not None:
            completion["usage"] = self._usage
        if self._id is not None:
            completion["id"] = self._id
        return completion
