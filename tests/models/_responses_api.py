"""A strict fake of OpenAI's Responses API (``POST /v1/responses``)::

    api = ResponsesAPI(
        answer(reasoning("Look the weather up."), function_call("call_1", "get_weather",
               {"city": "Paris"})),
        answer("18 degrees."),
    )

A body is checked against the SDK's ``ResponseCreateParams`` types (``_shape``), then against
the rules the real API keeps beyond them (messages are the real API's where known):

- every ``function_call_output`` answers a ``function_call`` earlier in ``input`` by its
  ``call_id`` ("No tool call found for function call output with call_id ..."), once; every
  ``function_call`` is answered ("No tool output found for function call ...");
- reasoning items go back as the API issued them, paired with the item that followed them:
  a reasoning item must be followed by that item ("Item 'rs_...' of type 'reasoning' was
  provided without its required following item."), and an item that followed a reasoning
  item, sent back with its ``id``, must come with it ("Item 'fc_...' of type
  'function_call' was provided without its required 'reasoning' item: 'rs_...'."). With
  ``store: false`` nothing is kept on the server, so a reasoning item must bring its
  ``encrypted_content`` (issued only when ``include`` asks for
  ``reasoning.encrypted_content``); that content must be intact;
- tool names match ``^[a-zA-Z0-9_-]{1,64}$`` and are unique, ``parameters`` is an object
  schema, ``tool_choice`` needs tools, ``max_output_tokens`` is at least 16, ``input`` is not
  empty.

The fake keeps no state between requests, as a server that stored nothing: item ids carry what
it needs to know (``rs_<response>_<n>``; an item that followed reasoning item ``j``,
``fc_<response>_<n>_r<j>``), and encrypted content is an HMAC under a secret every fake
shares, so a conversation from one fake (one process) checks out in the next. A response's id
is a hash of the request, so the same request gets the same ids.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Any

from openai.types.responses import Response
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming,
    ResponseCreateParamsStreaming,
)

from . import _responses_sse
from ._openai_fake import TOOL_NAME, ApiError, FakeAPI, Refused, ScriptError, check_body, shaped

SECRET = b"tether-fake-responses-api"
CREATED = 1_767_225_600.0


@dataclass(frozen=True)
class Text:
    text: str
    annotations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Refusal:
    refusal: str


@dataclass(frozen=True)
class Message:
    parts: tuple[Text | Refusal, ...]
    phase: str | None = None


@dataclass(frozen=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reasoning:
    summary: str


Item = Message | FunctionCall | Reasoning


def message(*parts: str | Text | Refusal, phase: str | None = None) -> Message:
    """An output message of text (``str`` parts) and refusals."""
    return Message(tuple(Text(p) if isinstance(p, str) else p for p in parts), phase)


def function_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> FunctionCall:
    """A function call; a ``str`` is sent as the arguments exactly (malformed JSON, say)."""
    return FunctionCall(
        call_id, name, arguments if isinstance(arguments, str) else json.dumps(arguments)
    )


def reasoning(summary: str) -> Reasoning:
    """A reasoning item with one summary text."""
    return Reasoning(summary)


@dataclass(frozen=True)
class Answer:
    """One scripted response: its output items and how it ended."""

    items: tuple[Item, ...]
    incomplete: str | None = None
    failed: tuple[str, str] | None = None
    usage: dict[str, Any] = field(default_factory=dict)


def answer(
    *items: Item | str, incomplete: str | None = None, usage: dict[str, Any] | None = None
) -> Answer:
    """A response of ``items`` (a ``str`` is a message of one text). ``incomplete`` is the
    reason an incomplete response stopped (``max_output_tokens``, ``content_filter``)."""
    if incomplete not in (None, "max_output_tokens", "content_filter"):
        raise ScriptError(f"incomplete reason {incomplete!r} is not one the API gives")
    return Answer(
        tuple(message(i) if isinstance(i, str) else i for i in items), incomplete, None, usage or {}
    )


def failed(code: str, text: str) -> Answer:
    """A response that failed on the server (``status: failed`` with its ``error``)."""
    return Answer((), None, (code, text))


def seal(item_id: str, summary: str) -> str:
    """The encrypted content the fake gives a reasoning item: an HMAC over its id and text."""
    mac = hmac.new(SECRET, f"{item_id}\0{summary}".encode(), hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


_REASONING_ID = re.compile(r"^rs_([0-9a-f]+)_(\d+)$")
_FOLLOWER_ID = re.compile(r"^(fc|msg)_([0-9a-f]+)_(\d+)_r(\d+)$")


class ResponsesAPI(FakeAPI[Answer]):
    """The fake Responses API (see the module doc)."""

    path = "/responses"

    def check(self, body: object) -> dict[str, Any]:
        checked = check_body(body, ResponseCreateParamsNonStreaming, ResponseCreateParamsStreaming)
        items = checked.get("input")
        if not items:
            raise Refused("Invalid 'input': empty. Expected some input.", param="input")
        if (checked.get("max_output_tokens") or 16) < 16:
            raise Refused(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
                f"16, but got {checked['max_output_tokens']} instead.",
                param="max_output_tokens",
            )
        names = _check_tools(checked.get("tools") or [])
        if "tool_choice" in checked and not names:
            raise Refused(
                "Tool choice is only allowed when tools are specified.", param="tool_choice"
            )
        if isinstance(items, list):
            _check_calls(items)
            _check_reasoning(items, store=checked.get("store") is not False)
        return checked

    def answer(self, scripted: Answer, body: dict[str, Any]) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]
        _allowed(scripted, body)
        output: list[dict[str, Any]] = []
        after: int | None = None  # the reasoning item the items that follow it pair with
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        for index, item in enumerate(scripted.items):
            tail = "" if after is None else f"_r{after}"
            if isinstance(item, Reasoning):
                rs_id = f"rs_{digest}_{index}"
                out: dict[str, Any] = {
                    "type": "reasoning",
                    "id": rs_id,
                    "summary": [{"type": "summary_text", "text": item.summary}],
                }
                if encrypted:
                    out["encrypted_content"] = seal(rs_id, item.summary)
                after = index
            elif isinstance(item, FunctionCall):
                out = {
                    "type": "function_call",
                    "id": f"fc_{digest}_{index}{tail}",
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": item.arguments,
                    "status": "completed",
                }
            else:
                out = {
                    "type": "message",
                    "id": f"msg_{digest}_{index}{tail}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [_part(p) for p in item.parts],
                }
                if item.phase is not None:
                    out["phase"] = item.phase
            output.append(out)
        status = (
            "failed" if scripted.failed else "incomplete" if scripted.incomplete else "completed"
        )
        response: dict[str, Any] = {
            "id": f"resp_{digest}",
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "usage": _usage(scripted, body),
            "incomplete_details": {"reason": scripted.incomplete} if scripted.incomplete else None,
            "error": {"code": scripted.failed[0], "message": scripted.failed[1]}
            if scripted.failed
            else None,
        }
        shaped(response, Response, "answer")
        return response

    def stream(self, answer: dict[str, Any], body: dict[str, Any], error: ApiError | None) -> bytes:
        if error is not None:
            start = self.answer(Answer(()), body)
            return _responses_sse.events(
                start, error={"code": error.code, "message": error.message}
            )
        return _responses_sse.events(answer)


def _part(part: Text | Refusal) -> dict[str, Any]:
    if isinstance(part, Refusal):
        return {"type": "refusal", "refusal": part.refusal}
    return {
        "type": "output_text",
        "text": part.text,
        "annotations": list(part.annotations),
        "logprobs": [],
    }


def _usage(scripted: Answer, body: dict[str, Any]) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": max(1, len(json.dumps(body["input"])) // 4),
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": max(1, len(repr(scripted.items)) // 8),
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    for key, value in scripted.usage.items():
        if isinstance(value, dict):
            usage[key] = {**usage[key], **value}
        else:
            usage[key] = value
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return usage


def _check_tools(tools: list[dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if tool["type"] != "function":
            raise Refused("this fake models function tools only", param=f"tools[{index}].type")
        name = tool["name"]
        if not re.fullmatch(TOOL_NAME, name):
            raise Refused(
                f"Invalid 'tools[{index}].name': string does not match pattern. Expected a "
                f"string that matches the pattern '{TOOL_NAME}'.",
                param=f"tools[{index}].name",
            )
        if name in names:
            raise Refused(f"Duplicate tool name: '{name}'", param="tools")
        names.add(name)
        if (tool["parameters"] or {}).get("type") != "object":
            raise Refused(
                f"Invalid schema for function '{name}': schema must be a JSON Schema of "
                "'type: \"object\"'",
                param=f"tools[{index}].parameters",
            )
    return names


def _check_calls(items: list[dict[str, Any]]) -> None:
    calls: set[str] = set()
    answered: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                raise Refused(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param=f"input[{index}]",
                )
            if call_id in answered:
                raise Refused(
                    f"Duplicate function call output for call_id {call_id}.",
                    param=f"input[{index}]",
                )
            answered.add(call_id)
    missing = sorted(calls - answered)
    if missing:
        raise Refused(f"No tool output found for function call {missing[0]}.", param="input")


def _check_reasoning(items: list[dict[str, Any]], *, store: bool) -> None:
    ids = [item.get("id") for item in items]
    for index, item in enumerate(items):
        item_id = item.get("id")
        if item.get("type") == "reasoning":
            found = _REASONING_ID.match(str(item_id))
            if found is None:
                raise Refused(f"Item with id '{item_id}' not found.", status=404, param="input")
            encrypted = item.get("encrypted_content")
            summary = "".join(s["text"] for s in item["summary"])
            if encrypted is None and not store:
                raise Refused(
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                    "is set to false. Try again with `store` set to true, or remove this item "
                    "from your input.",
                    status=404,
                    param="input",
                )
            if encrypted is not None and not hmac.compare_digest(
                encrypted, seal(str(item_id), summary)
            ):
                raise Refused(
                    f"The encrypted content for item {item_id} could not be verified.",
                    param="input",
                )
            digest, n = found.groups()
            follower = _FOLLOWER_ID.match(str(ids[index + 1])) if index + 1 < len(ids) else None
            if follower is None or follower.group(2, 3, 4) != (digest, str(int(n) + 1), n):
                raise Refused(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required "
                    "following item.",
                    param="input",
                )
        follows = _FOLLOWER_ID.match(str(item_id)) if item_id is not None else None
        if follows is not None:
            needed = f"rs_{follows.group(2)}_{follows.group(4)}"
            if needed not in ids[:index]:
                raise Refused(
                    f"Item '{item_id}' of type '{item.get('type')}' was provided without its "
                    f"required 'reasoning' item: '{needed}'.",
                    param="input",
                )


def _allowed(scripted: Answer, body: dict[str, Any]) -> None:
    names = {t["name"] for t in body.get("tools") or []}
    calls = [i for i in scripted.items if isinstance(i, FunctionCall)]
    for c in calls:
        if c.name not in names:
            raise ScriptError(f"the answer calls {c.name!r}, a tool the request did not define")
    if calls and body.get("tool_choice") == "none":
        raise ScriptError("the request said tool_choice 'none'")
    if len(calls) > 1 and body.get("parallel_tool_calls") is False:
        raise ScriptError("the request said parallel_tool_calls false: one call at most")
    for index, item in enumerate(scripted.items):
        following = scripted.items[index + 1] if index + 1 < len(scripted.items) else None
        if isinstance(item, Reasoning) and not isinstance(following, Message | FunctionCall):
            raise ScriptError("a reasoning item is followed by a message or a function call")
