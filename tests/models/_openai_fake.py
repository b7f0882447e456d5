"""What the strict fakes of OpenAI's two APIs share: the HTTP side, scripts and errors.

``ChatAPI`` (``_chat_api``) and ``ResponsesAPI`` (``_responses_api``) are ``httpx2.MockTransport``
handlers the real ``openai`` SDK talks to, so every request goes through the SDK's own
serialisation, error classes and response (or stream) parsing. Each accepted request takes the
next scripted answer, or an answer from a function of the request (``respond=``: what a fake
needs when it runs in processes that are killed and resumed, since a new process must give the
same answer to the same request). A request the real API would refuse gets its status and
error body, ``{"error": {"message", "type", "param", "code"}}``, and is kept in
``rejections``; a scripted answer the real model could not have given is a ``ScriptError``.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx2
import openai

from ._shape import Invalid, check_shape

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class ScriptError(AssertionError):
    """The test scripted an answer the real model could not give to that request."""


class Refused(Exception):
    """A request the real API refuses: status, error type, message, and the param it names."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.param = param
        self.code = code

    @classmethod
    def invalid(cls, exc: Invalid) -> Refused:
        """A body whose shape does not fit the SDK's types (the path is the ``param``)."""
        param = ".".join(str(p) for p in exc.path) or None
        return cls(f"Invalid value: {exc}", param=param)


@dataclass(frozen=True)
class ApiError:
    """A scripted error: status, the API's error ``type`` and ``code``, message and headers.

    ``in_stream``: for a streaming request, answer HTTP 200 and break the stream off with the
    error after the first event, as the API does with a server error mid-answer.
    """

    status: int
    error_type: str
    message: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    in_stream: bool = False


def api_error(
    status: int,
    error_type: str,
    message: str = "scripted error",
    *,
    code: str | None = None,
    retry_after: str | None = None,
    retry_after_ms: str | None = None,
    in_stream: bool = False,
) -> ApiError:
    """An error answer: ``api_error(429, "requests", "Rate limit reached", code=
    "rate_limit_exceeded", retry_after="2")``."""
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return ApiError(status, error_type, message, code, headers, in_stream)


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> Any:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


@dataclass(frozen=True)
class Exchange:
    """A request the fake accepted, and what it answered (a body, or an error)."""

    body: dict[str, Any]
    headers: httpx2.Headers
    stream: bool
    answer: dict[str, Any] | ApiError


@dataclass(frozen=True)
class Rejection:
    """A request the fake refused, as the real API would."""

    body: object
    status: int
    message: str
    param: str | None


def check_body(body: object, non_streaming: object, streaming: object) -> dict[str, Any]:
    """``body`` checked against the SDK's request type (which one: by its ``stream``)."""
    stream = isinstance(body, dict) and body.get("stream") is True
    try:
        check_shape(body, streaming if stream else non_streaming)
    except Invalid as exc:
        raise Refused.invalid(exc) from None
    assert isinstance(body, dict)
    return body


def shaped(value: object, tp: object, where: str) -> None:
    """A scripted value (or one the fake built from it) must fit the SDK's answer types."""
    try:
        check_shape(value, tp)
    except Invalid as exc:
        raise ScriptError(f"{where}: {exc}") from None


def pieces(text: str, size: int = 7) -> Iterator[str]:
    """``text`` in small pieces, so every streamed value takes several deltas to rebuild."""
    for start in range(0, len(text), size):
        yield text[start : start + size]


Script = TypeVar("Script")


class FakeAPI(Generic[Script]):
    """One endpoint of an OpenAI-shaped API, answering from a script (see the module doc).

    Subclasses name the ``path`` and implement ``check`` (the request's rules; raises
    ``Refused``), ``answer`` (a scripted answer as the response body, checked against the
    request; raises ``ScriptError``) and ``stream`` (a body as server-sent events).
    """

    path = ""

    def __init__(
        self, *script: Script | ApiError, respond: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        if script and respond is not None:
            raise ValueError("give a script or a respond function, not both")
        self._script: list[Script | ApiError] = list(script)
        self._respond = respond
        self._ids = itertools.count(1)
        self.exchanges: list[Exchange] = []
        """Every accepted request, in order."""
        self.rejections: list[Rejection] = []
        """Every refused request, in order."""
        self.script_errors: list[ScriptError] = []
        """Answers the script got wrong (also raised to the SDK, which wraps them)."""
        self.calls = 0
        """Every HTTP request received, accepted or not."""

    def add(self, *script: Script | ApiError) -> None:
        """Queue more answers."""
        self._script.extend(script)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The accepted request bodies, as parsed JSON."""
        return [exchange.body for exchange in self.exchanges]

    def assert_all_answered(self) -> None:
        """Fail if a scripted answer was not asked for or the script was wrong somewhere."""
        if self.script_errors:
            raise self.script_errors[0]
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted answer(s) never asked for")

    @asynccontextmanager
    async def client(
        self, *, max_retries: int = 0, base_url: str = DEFAULT_BASE_URL, **options: Any
    ) -> AsyncIterator[openai.AsyncOpenAI]:
        """An SDK client whose requests reach this fake (``max_retries=0`` by default)."""
        async with (
            httpx2.AsyncClient(transport=httpx2.MockTransport(self)) as http,
            self.sdk_client(http, max_retries=max_retries, base_url=base_url, **options) as client,
        ):
            yield client

    def sdk_client(
        self, http: httpx2.AsyncClient, *, base_url: str = DEFAULT_BASE_URL, **options: Any
    ) -> openai.AsyncOpenAI:
        """An SDK client on ``http`` (whose transport must reach this fake)."""
        options.setdefault("max_retries", 0)
        return openai.AsyncOpenAI(
            api_key="test-key", base_url=base_url, http_client=http, **options
        )

    # -- what subclasses say --------------------------------------------------------------

    def check(self, body: object) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self, scripted: Script, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def stream(self, answer: dict[str, Any], body: dict[str, Any], error: ApiError | None) -> bytes:
        raise NotImplementedError

    # -- the transport --------------------------------------------------------------------

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        request_id = f"req_fake{next(self._ids):06d}"
        headers = {"x-request-id": request_id}
        try:
            body: object = json.loads(request.content) if request.content else None
        except ValueError:
            body = request.content
        try:
            if request.method != "POST" or not request.url.path.endswith(self.path):
                raise Refused(f"Invalid URL ({request.method} {request.url.path})", status=404)
            if not request.headers.get("authorization", "").startswith("Bearer "):
                raise Refused(
                    "You didn't provide an API key.", status=401, error_type="invalid_api_key"
                )
            if isinstance(body, bytes):
                raise Refused("We could not parse the JSON body of your request.")
            checked = self.check(copy.deepcopy(body))
        except Refused as exc:
            self.rejections.append(Rejection(body, exc.status, exc.message, exc.param))
            return httpx2.Response(
                exc.status,
                json=error_body(exc.message, exc.error_type, exc.param, exc.code),
                headers=headers,
            )
        scripted = self._next(checked)
        stream = checked.get("stream") is True
        if isinstance(scripted, ApiError):
            self.exchanges.append(Exchange(checked, request.headers, stream, scripted))
            if scripted.in_stream and stream:
                return self._sse(headers, self.stream({}, checked, scripted))
            error = error_body(scripted.message, scripted.error_type, None, scripted.code)
            return httpx2.Response(
                scripted.status, json=error, headers={**headers, **scripted.headers}
            )
        try:
            answer = self.answer(scripted, checked)
        except ScriptError as exc:
            self.script_errors.append(exc)
            raise
        self.exchanges.append(Exchange(checked, request.headers, stream, answer))
        if stream:
            return self._sse(headers, self.stream(answer, checked, None))
        return httpx2.Response(200, json=answer, headers=headers)

    def _next(self, body: dict[str, Any]) -> Script | ApiError:
        if self._respond is not None:
            scripted: Script | ApiError = self._respond(copy.deepcopy(body))
            return scripted
        if not self._script:
            exc = ScriptError(f"request {len(self.exchanges) + 1} came with no answer scripted")
            self.script_errors.append(exc)
            raise exc
        return self._script.pop(0)

    @staticmethod
    def _sse(headers: dict[str, str], content: bytes) -> httpx2.Response:
        return httpx2.Response(
            200, content=content, headers={**headers, "content-type": "text/event-stream"}
        )
