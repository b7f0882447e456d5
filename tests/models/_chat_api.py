"""A strict fake of OpenAI's Chat Completions API (``POST /v1/chat/completions``)::

    api = ChatAPI(
        answer(call("call_1", "get_weather", {"city": "Paris"})),
        answer("18 degrees."),
    )
    async with api.client() as client:
        ...  # openai.AsyncOpenAI, max_retries=0 unless asked
    api.assert_all_answered()

A body is checked against the SDK's ``CompletionCreateParams`` types (``_shape``), then against
the rules the real API keeps beyond them; each rule's message is the real API's where known:

- ``tool`` messages answer the ``tool_calls`` of the assistant message right before them, each
  call exactly once, by ``tool_call_id`` (the API's "messages with role 'tool' must be a
  response to a preceeding message with 'tool_calls'" and "An assistant message with
  'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"); the
  ids of one message's calls are unique;
- tool names match ``^[a-zA-Z0-9_-]{1,64}$`` and are unique, a tool's ``parameters`` is an
  object schema, ``tool_choice`` needs tools, ``stream_options`` needs ``stream``, ``n`` is 1
  (the fake gives one answer per call, as tether asks);
- an ``image_url`` is an ``https`` URL or a ``data:image/...`` URL; a ``file`` part has
  ``file_data`` (a ``data:`` URL) or a ``file_id``.

A scripted answer is held to what the request allowed (a tool it defined; no call when
``tool_choice`` is ``"none"``; one call at most without ``parallel_tool_calls``) and to the
SDK's ``ChatCompletion`` type. ``reasoning`` adds the ``reasoning_content`` field some
compatible servers (vLLM, DeepSeek) send, outside the SDK's type. Streamed (``stream:
true``), an answer is ``chat.completion.chunk`` events, each checked against the SDK's
``ChatCompletionChunk``: the role, the text and refusal in pieces, each call's id and name in
its first delta and its arguments in pieces, the finish reason, then (with
``stream_options.include_usage``) a chunk with the usage and no choices, then ``[DONE]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

from ._openai_fake import (
    TOOL_NAME,
    ApiError,
    FakeAPI,
    Refused,
    ScriptError,
    check_body,
    error_body,
    pieces,
    shaped,
)

CREATED = 1_767_225_600  # fixed, so that the same request always gets the same answer


@dataclass(frozen=True)
class Call:
    """A tool call in an answer; ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str


def call(id: str, name: str, arguments: dict[str, Any] | str) -> Call:
    """A tool call; a ``str`` is sent as the arguments exactly (malformed JSON, say)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Call(id, name, text)


@dataclass(frozen=True)
class Answer:
    """One scripted answer: the assistant message and how it stopped."""

    content: str | None
    calls: tuple[Call, ...]
    finish_reason: str
    refusal: str | None = None
    reasoning: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


def answer(
    *parts: str | Call,
    finish_reason: str | None = None,
    refusal: str | None = None,
    reasoning: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Answer:
    """An answer of text (``str`` parts, joined) and tool calls. ``finish_reason`` defaults to
    ``tool_calls`` when there are calls, else ``stop``.

    Raises:
        ScriptError: an answer no model could give.
    """
    texts = [p for p in parts if isinstance(p, str)]
    calls = tuple(p for p in parts if isinstance(p, Call))
    finish = finish_reason or ("tool_calls" if calls else "stop")
    if finish not in ("stop", "length", "tool_calls", "content_filter"):
        raise ScriptError(f"finish_reason {finish!r} is not one the API sends")
    if (finish == "tool_calls") != bool(calls) and finish != "length":
        raise ScriptError("finish_reason 'tool_calls' goes with tool calls, and only with them")
    if refusal is not None and (calls or texts):
        raise ScriptError("a refusal comes alone")
    return Answer("".join(texts) if texts else None, calls, finish, refusal, reasoning, usage or {})


class ChatAPI(FakeAPI[Answer]):
    """The fake Chat Completions API (see the module doc)."""

    path = "/chat/completions"

    def check(self, body: object) -> dict[str, Any]:
        checked = check_body(
            body, CompletionCreateParamsNonStreaming, CompletionCreateParamsStreaming
        )
        if not checked["messages"]:
            raise Refused(
                "Invalid 'messages': empty array. Expected an array with minimum length 1."
            )
        if checked.get("n") not in (None, 1):
            raise Refused("this fake gives one choice per request: 'n' must be 1", param="n")
        if "stream_options" in checked and not checked.get("stream"):
            raise Refused(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        names = _check_tools(checked.get("tools") or [])
        if "tool_choice" in checked and not names:
            raise Refused(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
                param="tool_choice",
            )
        _check_messages(checked["messages"])
        return checked

    def answer(self, scripted: Answer, body: dict[str, Any]) -> dict[str, Any]:
        _allowed(scripted, body)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": scripted.content,
            "refusal": scripted.refusal,
        }
        if scripted.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in scripted.calls
            ]
        completion = {
            "id": f"chatcmpl-fake{len(self.exchanges) + 1:06d}",
            "object": "chat.completion",
            "created": CREATED,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": scripted.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": _usage(scripted, body),
        }
        shaped(completion, ChatCompletion, "answer")
        if scripted.reasoning is not None:  # a compatible server's own field
            message["reasoning_content"] = scripted.reasoning
        return completion

    def stream(self, answer: dict[str, Any], body: dict[str, Any], error: ApiError | None) -> bytes:
        head = {"id": "chatcmpl-fakestream", "object": "chat.completion.chunk", "created": CREATED}
        head["model"] = body["model"]
        chunks = [_chunk(head, {"role": "assistant", "content": ""})]
        if error is not None:
            lines = [json.dumps(c) for c in chunks]
            lines.append(json.dumps(error_body(error.message, error.error_type, None, error.code)))
            return "".join(f"data: {line}\n\n" for line in lines).encode()
        choice = answer["choices"][0]
        message = choice["message"]
        for key in ("content", "refusal"):
            chunks += [_chunk(head, {key: p}) for p in pieces(message.get(key) or "")]
        for index, tool_call in enumerate(message.get("tool_calls") or []):
            first = {"index": index, "id": tool_call["id"], "type": "function"}
            first["function"] = {"name": tool_call["function"]["name"], "arguments": ""}
            chunks.append(_chunk(head, {"tool_calls": [first]}))
            for p in pieces(tool_call["function"]["arguments"]):
                chunks.append(
                    _chunk(head, {"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                )
        chunks.append(_chunk(head, {}, finish=choice["finish_reason"]))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**head, "choices": [], "usage": answer["usage"]})
        for chunk in chunks:
            shaped(chunk, ChatCompletionChunk, "streamed chunk")
        # A compatible server's own field, outside the SDK's type: streamed first, unchecked.
        reasoning = message.get("reasoning_content") or ""
        chunks[1:1] = [_chunk(head, {"reasoning_content": p}) for p in pieces(reasoning)]
        return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def _chunk(
    head: dict[str, Any], delta: dict[str, Any], *, finish: str | None = None
) -> dict[str, Any]:
    return {
        **head,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def _usage(scripted: Answer, body: dict[str, Any]) -> dict[str, Any]:
    usage = dict(scripted.usage)
    usage.setdefault("prompt_tokens", max(1, len(json.dumps(body["messages"])) // 4))
    usage.setdefault(
        "completion_tokens",
        max(1, len(json.dumps([scripted.content, [c.arguments for c in scripted.calls]])) // 4),
    )
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


def _check_tools(tools: list[dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if tool["type"] != "function":
            raise Refused("this fake models function tools only", param=f"tools[{index}].type")
        function = tool["function"]
        name = function["name"]
        if not re.fullmatch(TOOL_NAME, name):
            raise Refused(
                f"Invalid 'tools[{index}].function.name': string does not match pattern. "
                f"Expected a string that matches the pattern '{TOOL_NAME}'.",
                param=f"tools[{index}].function.name",
            )
        if name in names:
            raise Refused(f"Duplicate tool name: '{name}'", param="tools")
        names.add(name)
        parameters = function.get("parameters")
        if parameters is not None and parameters.get("type") != "object":
            raise Refused(
                f"Invalid schema for function '{name}': schema must be a JSON Schema of "
                "'type: \"object\"'",
                param=f"tools[{index}].function.parameters",
            )
    return names


def _check_messages(messages: list[dict[str, Any]]) -> None:
    waiting: list[str] = []  # calls of the last assistant message not yet answered
    answering = False
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if not answering or call_id not in waiting:
                raise Refused(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            waiting.remove(call_id)
            continue
        if waiting:
            raise Refused(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(waiting)}",
                param=f"messages.[{index}].role",
            )
        answering = False
        if role == "user":
            _check_parts(message["content"], index)
        if role == "assistant" and message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            if len(set(ids)) != len(ids):
                raise Refused(
                    f"Invalid 'messages[{index}].tool_calls': duplicate tool call ids {ids}",
                    param=f"messages.[{index}].tool_calls",
                )
            waiting, answering = ids, True
        elif role == "assistant" and message.get("content") is None and not message.get("refusal"):
            raise Refused(
                f"Invalid 'messages[{index}]': an assistant message needs content, a refusal "
                "or tool_calls",
                param=f"messages.[{index}].content",
            )
    if waiting:
        raise Refused(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(waiting)}",
            param="messages",
        )


def _check_parts(content: object, index: int) -> None:
    if not isinstance(content, list):
        return
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if part["type"] == "image_url":
            url = part["image_url"]["url"]
            if not (url.startswith("https://") or re.match(r"data:image/[a-z+.-]+;base64,", url)):
                raise Refused(
                    f"Invalid '{where}.image_url.url': expected an https or data:image URL"
                )
        if part["type"] == "file":
            file = part["file"]
            data = file.get("file_data")
            if data is None and "file_id" not in file:
                raise Refused(f"Invalid '{where}.file': file_data or file_id is required")
            if data is not None and not data.startswith("data:"):
                raise Refused(f"Invalid '{where}.file.file_data': expected a data: URL")


def _allowed(scripted: Answer, body: dict[str, Any]) -> None:
    names = {t["function"]["name"] for t in body.get("tools") or []}
    for c in scripted.calls:
        if c.name not in names:
            raise ScriptError(f"the answer calls {c.name!r}, a tool the request did not define")
    if scripted.calls and body.get("tool_choice") == "none":
        raise ScriptError("the request said tool_choice 'none'")
    if len(scripted.calls) > 1 and body.get("parallel_tool_calls") is False:
        raise ScriptError("the request said parallel_tool_calls false: one call at most")
