"""A strict fake of the Anthropic Messages API, for the test suite.

The real SDK client talks to it through ``httpx2.MockTransport``, so every request goes
through the SDK's own serialisation, retries, error classes and response (or stream) parsing::

    api = MessagesAPI(
        answer(tool_use("toolu_1", "get_weather", {"city": "Paris"})),
        answer(text("18 degrees.")),
    )
    async with api.client() as client:
        ...  # anthropic.AsyncAnthropic, max_retries=0 unless asked
    api.assert_all_answered()

Each ``POST /v1/messages`` body is checked as the real API checks it (``_shape`` for
the shape, against the SDK's ``MessageCreateParams`` types; ``_messages_rules`` for the rules
beyond it); what the API would refuse gets HTTP 400 with its error body,
``{"type": "error", "error": {"type": "invalid_request_error", "message": "<path>: ..."}}``.
An accepted request takes the next scripted answer (or error), which is itself held to what
the request allowed (``ScriptError`` when the real model could not have given it), and is
sent as JSON or, with ``stream: true``, as server-sent events (``_messages_sse``).

Long requests and streaming: the SDK refuses, before sending anything, a non-streaming
``messages.create`` (or ``messages.parse``) whose ``max_tokens`` is large, with ``ValueError:
Streaming is required for operations that may take longer than 10 minutes.`` (raised at
``anthropic/_base_client.py`` line 870 in SDK 2.14.0). The rule is
``_calculate_nonstreaming_timeout`` (same file, lines 864-877), called from
``resources/messages/messages.py`` (``create``: lines 1236-1239 sync, 3042-3045 async, only
when ``stream`` is false; ``parse``: lines 1449-1452 and 3254-3257) when no per-call
``timeout`` is given and the client's timeout is still the default (``DEFAULT_TIMEOUT``, 10
minutes; a client built with any other ``timeout`` skips the check). It refuses when
``3600 * max_tokens / 128_000 > 600``, i.e. ``max_tokens > 21_333``, or when the model is in
``MODEL_NONSTREAMING_TOKENS`` (``anthropic/_constants.py`` line 20: the Claude Opus 4 and 4.1
ids, 8,192) and ``max_tokens`` exceeds that. ``requires_streaming`` below says the same.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, get_args

import anthropic
import httpx2
import jiter
from anthropic.types import Message, RefusalStopDetails, StopReason, Usage
from anthropic.types.content_block import ContentBlock

from . import _messages_sse
from ._messages_rules import (
    DEFAULT_SECRET,
    Checked,
    Issued,
    ScriptError,
    check_answer,
    check_request,
    normalized,
    redacted_data,
    sign_thinking,
)
from ._shape import Invalid, check_shape

__all__ = [
    "DEFAULT_SECRET",
    "Answer",
    "ApiError",
    "Exchange",
    "MessagesAPI",
    "Rejection",
    "ScriptError",
    "answer",
    "api_error",
    "redacted_thinking",
    "requires_streaming",
    "server_tool_use",
    "text",
    "thinking",
    "tool_use",
    "truncated_tool_use",
    "web_search_result",
]

# -- blocks ---------------------------------------------------------------------------------


def text(value: str, *, citations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``text`` block; ``citations`` as the API gives them (char_location, ...)."""
    block: dict[str, Any] = {"type": "text", "text": value}
    if citations is not None:
        block["citations"] = citations
    return block


def tool_use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block: the model calls a tool the request defined."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


class _Truncated(dict[str, Any]):
    """A tool_use block cut short, with the input JSON the model had written."""

    partial_json: str


def truncated_tool_use(id: str, name: str, partial_json: str) -> dict[str, Any]:
    """A ``tool_use`` block that ``max_tokens`` cut off while the model wrote its input.

    The block is still there, its ``input`` what had been written so far, parsed the way the
    SDK's stream accumulator parses it (``jiter`` partial mode: an unfinished string or key is
    dropped, so ``'{"city": "Par'`` gives ``{}``). Streamed, the raw ``partial_json`` is sent.
    Put it last in an ``answer``, whose ``stop_reason`` is then ``max_tokens``.
    """
    block = _Truncated(tool_use(id, name, {}))
    if partial_json:
        parsed = jiter.from_json(partial_json.encode(), partial_mode=True)
        if not isinstance(parsed, dict):
            raise ScriptError(f"a tool input is a JSON object; {partial_json!r} does not start one")
        block["input"] = parsed
    block.partial_json = partial_json
    return block


def thinking(value: str, *, secret: bytes = DEFAULT_SECRET) -> dict[str, Any]:
    """A ``thinking`` block, signed as this fake signs it (HMAC-SHA256 of the text)."""
    return {"type": "thinking", "thinking": value, "signature": sign_thinking(value, secret)}


def redacted_thinking(seed: str = "", *, secret: bytes = DEFAULT_SECRET) -> dict[str, Any]:
    """A ``redacted_thinking`` block with opaque data only this fake (its secret) issues."""
    return {"type": "redacted_thinking", "data": redacted_data(seed, secret)}


def server_tool_use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A ``server_tool_use`` block (``web_search``, ``web_fetch``, ``code_execution``, ...):
    a tool the API runs itself; ``id`` as the API makes them, ``srvtoolu_...``."""
    return {"type": "server_tool_use", "id": id, "name": name, "input": input}


def web_search_result(tool_use_id: str, results: list[tuple[str, str]] | str) -> dict[str, Any]:
    """The ``web_search_tool_result`` block that follows a web_search ``server_tool_use``:
    ``results`` as (url, title) pairs, or an error code such as ``"max_uses_exceeded"``."""
    content: Any
    if isinstance(results, str):
        content = {"type": "web_search_tool_result_error", "error_code": results}
    else:
        content = [
            {
                "type": "web_search_result",
                "url": url,
                "title": title,
                "encrypted_content": f"enc:{url}",
                "page_age": None,
            }
            for url, title in results
        ]
    return {"type": "web_search_tool_result", "tool_use_id": tool_use_id, "content": content}


# -- answers ----------------------------------------------------------------------------------

_STOP_REASONS = frozenset(get_args(StopReason))


@dataclass(frozen=True)
class Answer:
    """One scripted answer: the content blocks of a Messages response and how it stopped.

    ``usage`` may leave out ``input_tokens``/``output_tokens``; the fake fills them in from
    the request's size (``output_tokens`` is ``max_tokens`` when the answer ran out of them).
    """

    content: list[dict[str, Any]]
    stop_reason: StopReason
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    partial_json: Mapping[int, str] = field(default_factory=dict)


def answer(
    *blocks: dict[str, Any] | str,
    stop_reason: StopReason | None = None,
    stop_sequence: str | None = None,
    stop_details: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> Answer:
    """An answer of ``blocks`` (a ``str`` is a text block), checked against the SDK's response
    types. ``stop_reason`` defaults to ``max_tokens`` after a ``truncated_tool_use``,
    ``stop_sequence`` when one is given, ``tool_use`` when a tool is called, else ``end_turn``.

    Raises:
        ScriptError: the answer is not one the real API could send.
    """
    content = [text(b) if isinstance(b, str) else b for b in blocks]
    partial = {i: b.partial_json for i, b in enumerate(content) if isinstance(b, _Truncated)}
    uses = [b for b in content if b.get("type") == "tool_use"]
    if stop_reason is None:
        stop_reason = (
            "max_tokens"
            if partial
            else "stop_sequence"
            if stop_sequence is not None
            else "tool_use"
            if uses
            else "end_turn"
        )
    for index, block in enumerate(content):
        _shape(block, ContentBlock, f"answer block {index}")
    if stop_reason not in _STOP_REASONS:
        raise ScriptError(f"stop_reason {stop_reason!r} is none of {sorted(_STOP_REASONS)}")
    if stop_details is not None:
        _shape(stop_details, RefusalStopDetails, "stop_details")
        if stop_reason != "refusal":
            raise ScriptError("stop_details (a refusal's) need stop_reason 'refusal'")
    for key, value in (usage or {}).items():
        if key not in Usage.model_fields:
            raise ScriptError(f"usage.{key}: not a usage field the SDK knows")
        _shape(value, Usage.model_fields[key].annotation, f"usage.{key}")
    if partial and (list(partial) != [len(content) - 1] or stop_reason != "max_tokens"):
        raise ScriptError("a truncated_tool_use is the last block of a max_tokens answer")
    if stop_reason == "tool_use" and not uses:
        raise ScriptError("stop_reason 'tool_use' needs a tool_use block")
    if uses and stop_reason not in ("tool_use", "max_tokens", "pause_turn"):
        raise ScriptError(f"an answer that calls a tool stops with 'tool_use', not {stop_reason!r}")
    if (stop_reason == "stop_sequence") != (stop_sequence is not None):
        raise ScriptError("stop_sequence is given exactly when stop_reason is 'stop_sequence'")
    plain = [dict(b) for b in content]
    return Answer(
        copy.deepcopy(plain), stop_reason, stop_sequence, stop_details, dict(usage or {}), partial
    )


def _shape(value: object, tp: object, where: str) -> None:
    try:
        check_shape(value, tp)
    except Invalid as exc:
        raise ScriptError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class ApiError:
    """A scripted HTTP error: status, the API's error ``type`` and message, and headers.

    ``in_stream``: for a streaming request, answer HTTP 200 and break the stream off with an
    ``error`` event after ``message_start`` (as the API does with ``overloaded_error``).
    """

    status: int
    error_type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    in_stream: bool = False


def api_error(
    status: int,
    error_type: str,
    message: str = "scripted error",
    *,
    retry_after: str | None = None,
    retry_after_ms: str | None = None,
    request_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    in_stream: bool = False,
) -> ApiError:
    """An error answer: ``api_error(529, "overloaded_error", "Overloaded", retry_after="2")``."""
    extra = dict(headers or {})
    for name, value in (
        ("retry-after", retry_after),
        ("retry-after-ms", retry_after_ms),
        ("request-id", request_id),
    ):
        if value is not None:
            extra[name] = value
    return ApiError(status, error_type, message, extra, in_stream)


def requires_streaming(model: str, max_tokens: int) -> bool:
    """Whether the SDK refuses a non-streaming request of ``max_tokens`` for ``model`` (with its
    default timeout): the rule of ``_calculate_nonstreaming_timeout``, see the module doc."""
    from anthropic._constants import MODEL_NONSTREAMING_TOKENS

    limit = MODEL_NONSTREAMING_TOKENS.get(model)
    return 60 * 60 * max_tokens / 128_000 > 60 * 10 or (limit is not None and max_tokens > limit)


# -- the server -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """A request the fake accepted, and what it answered (a message body or an error)."""

    body: dict[str, Any]
    headers: httpx2.Headers
    stream: bool
    continues_pause: bool
    answer: dict[str, Any] | ApiError


@dataclass(frozen=True)
class Rejection:
    """A request the fake refused, as the real API would: HTTP status and error message."""

    body: object
    headers: httpx2.Headers
    status: int
    error_type: str
    message: str


Scripted = Answer | ApiError
Responder = Callable[[dict[str, Any]], Scripted]


class MessagesAPI:
    """The fake API: an ``httpx2.MockTransport`` handler that answers from a script.

    Args:
        *script: the answers (and errors) to give, in order, one per accepted request.
        respond: instead of a script, a function of the accepted request body.
        secret: the key thinking signatures are checked with (``DEFAULT_SECRET``, which the
            block helpers sign with, unless a test wants a foreign signature).
    """

    def __init__(
        self, *script: Scripted, respond: Responder | None = None, secret: bytes = DEFAULT_SECRET
    ) -> None:
        if script and respond is not None:
            raise ValueError("give a script or a respond function, not both")
        self._script: list[Scripted] = list(script)
        self._respond = respond
        self._secret = secret
        self._issued: list[Issued] = []
        self._ids = itertools.count(1)
        self.exchanges: list[Exchange] = []
        """Every accepted request, in order."""
        self.rejections: list[Rejection] = []
        """Every refused request, in order."""
        self.script_errors: list[ScriptError] = []
        """Answers the script got wrong (also raised to the SDK, which wraps them)."""
        self.calls = 0
        """Every HTTP request received, accepted or not."""

    def add(self, *script: Scripted) -> None:
        """Queue more answers."""
        self._script.extend(script)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The accepted request bodies, as parsed JSON."""
        return [exchange.body for exchange in self.exchanges]

    @property
    def pending(self) -> int:
        """Scripted answers not yet given."""
        return len(self._script)

    def assert_all_answered(self) -> None:
        """Fail if a scripted answer was not asked for or the script was wrong somewhere."""
        if self.script_errors:
            raise self.script_errors[0]
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted answer(s) never asked for")

    @asynccontextmanager
    async def client(
        self, *, max_retries: int = 0, **options: Any
    ) -> AsyncIterator[anthropic.AsyncAnthropic]:
        """An SDK client whose requests reach this fake (``max_retries=0`` by default)."""
        async with (
            httpx2.AsyncClient(transport=httpx2.MockTransport(self)) as http,
            anthropic.AsyncAnthropic(
                api_key="test-key", http_client=http, max_retries=max_retries, **options
            ) as client,
        ):
            yield client

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        request_id = f"req_fake{next(self._ids):06d}"
        try:
            body = json.loads(request.content) if request.content else None
        except ValueError:
            body = request.content
        if request.method != "POST" or request.url.path != "/v1/messages":
            return self._refuse(request, body, request_id, 404, "not_found_error", "Not Found")
        if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
            return self._refuse(
                request,
                body,
                request_id,
                401,
                "authentication_error",
                "x-api-key header is required",
            )
        if not request.headers.get("anthropic-version"):
            return self._refuse(
                request,
                body,
                request_id,
                400,
                "invalid_request_error",
                "anthropic-version: header is required",
            )
        try:
            if isinstance(body, bytes):
                raise Invalid((), "There was an error parsing the body: it is not valid JSON")
            checked = check_request(body, secret=self._secret, issued=self._issued)
        except Invalid as exc:
            return self._refuse(request, body, request_id, 400, "invalid_request_error", str(exc))
        scripted = self._next(checked)
        headers = {"request-id": request_id}
        if isinstance(scripted, ApiError):
            self._record(checked, request, scripted)
            error = _error_body(scripted.error_type, scripted.message, request_id)
            if scripted.in_stream and checked.stream:
                message = self._message(Answer([], "end_turn"), checked)
                stream = _messages_sse.events(message, error=error)
                return _sse(headers, _messages_sse.encode(stream))
            return httpx2.Response(
                scripted.status, json=error, headers={**headers, **scripted.headers}
            )
        message = self._message(scripted, checked)
        try:
            _shape(message, Message, "answer")
            check_answer(message, checked, self._secret)
        except ScriptError as exc:
            self.script_errors.append(exc)
            raise
        self._issued.append(Issued(normalized(message["content"]), message["stop_reason"]))
        self._record(checked, request, message)
        if checked.stream:
            stream = _messages_sse.events(message, partial_json=scripted.partial_json)
            return _sse(headers, _messages_sse.encode(stream))
        return httpx2.Response(200, json=message, headers=headers)

    def _next(self, checked: Checked) -> Scripted:
        if self._respond is not None:
            return self._respond(copy.deepcopy(checked.body))
        if not self._script:
            exc = ScriptError(f"request {len(self.exchanges) + 1} came with no answer scripted")
            self.script_errors.append(exc)
            raise exc
        return self._script.pop(0)

    def _message(self, scripted: Answer, checked: Checked) -> dict[str, Any]:
        body = checked.body
        usage = dict(scripted.usage)
        prompt = json.dumps([body.get("system"), body["messages"], body.get("tools")])
        usage.setdefault("input_tokens", max(1, len(prompt) // 4))
        if scripted.stop_reason == "max_tokens":
            usage.setdefault("output_tokens", body["max_tokens"])
        usage.setdefault(
            "output_tokens", min(body["max_tokens"], max(1, len(json.dumps(scripted.content)) // 4))
        )
        message: dict[str, Any] = {
            "id": f"msg_fake{len(self._issued) + 1:06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": copy.deepcopy(scripted.content),
            "stop_reason": scripted.stop_reason,
            "stop_sequence": scripted.stop_sequence,
            "usage": usage,
        }
        if scripted.stop_details is not None:
            message["stop_details"] = scripted.stop_details
        return message

    def _record(
        self, checked: Checked, request: httpx2.Request, answer: dict[str, Any] | ApiError
    ) -> None:
        self.exchanges.append(
            Exchange(checked.body, request.headers, checked.stream, checked.continues_pause, answer)
        )

    def _refuse(
        self,
        request: httpx2.Request,
        body: object,
        request_id: str,
        status: int,
        error_type: str,
        message: str,
    ) -> httpx2.Response:
        self.rejections.append(Rejection(body, request.headers, status, error_type, message))
        return httpx2.Response(
            status,
            json=_error_body(error_type, message, request_id),
            headers={"request-id": request_id},
        )


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def _sse(headers: dict[str, str], content: bytes) -> httpx2.Response:
    return httpx2.Response(
        200, content=content, headers={**headers, "content-type": "text/event-stream"}
    )
