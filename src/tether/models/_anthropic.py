"""``AnthropicModel``: the ``Model`` protocol on the official ``anthropic`` SDK.

The SDK is imported only when a model is first called (or a client is handed in), so importing
``tether.models`` stays cheap for the child processes that run agents. The SDK's exceptions
become ``ModelError`` at this boundary, classified: connection errors (also those the SDK lets
through as they are once a stream has begun), timeouts, a stream that ended before
``message_stop``, and HTTP 408/409/429/5xx (529 ``overloaded_error`` among them, also as an
``error`` event in the middle of a stream) are ``transient`` (with the server's
``retry-after``), and the runtime asks again within the run, journaled; anything else (400, 401,
403, 404, missing credentials, arguments the SDK refuses) parks the run for a person. A client
built here makes no retries of its own, so every retry is the runtime's and shows in the run's
timeline; a client passed in keeps its settings, and the runtime retries after it gives up.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import anyio

from .._errors import ModelError, ModelResponseError
from ..journal import Usage
from ._base import ModelReply, StreamEnd, SystemPrompt, check_reply_blocks, text_sink
from ._client import SDKClient, connection_failed, stream_errors
from ._messages import Message, ToolDefinition
from ._retry_after import retry_after

if TYPE_CHECKING:
    from types import TracebackType

    import anthropic

# Arguments AnthropicModel supplies itself; passing them as params would clash or (``stream``)
# change the shape of the answer.
_RESERVED_PARAMS = frozenset({"model", "messages", "system", "tools", "stream", "max_tokens"})


@final
class AnthropicModel:
    """A Claude model reached through ``anthropic.AsyncAnthropic``.

    Use it as an async context manager (or call ``aclose``) when it builds its own client, so
    the client's connection pool is released.

    Args:
        model: the model id, e.g. ``"claude-haiku-4-5"``; it is also this model's ``name``.
        client: the SDK client to use. By default one is built from the environment
            (``ANTHROPIC_API_KEY``, ...) on the first call, with ``max_retries=0`` (the runtime
            retries); pass your own to set timeouts, a base URL or retries of the SDK's own.
        max_tokens: the most tokens one answer may hold.
        server_tools: tools the API runs itself (``{"type": "web_search_20250305", "name":
            "web_search", "max_uses": 5}``, web fetch, code execution, ...), sent with every
            request after the application's tools and pinned with the model's parameters.
            Their calls and results come back as blocks of their own types, journaled as they
            are; the runtime runs nothing for them.
        stream: ``True`` always streams the answer, ``False`` never does; ``None`` (the
            default) streams when the SDK would refuse to wait for the answer (its rule: an
            expected time past ten minutes, ``max_tokens > 21,333``, or a model's own
            non-streaming limit) or when the supervisor has a text observer (``on_text``).
            A streamed answer is journaled once, whole, when the stream ends with
            ``message_stop``; a stream that ends any other way is a transient error.
        **params: further ``messages.create`` keyword arguments that shape answers
            (``stop_sequences``, ``thinking``, ``tool_choice``, ``metadata``, ...). Which ones
            exist depends on the installed SDK; a body field it has no argument for can still
            be sent with ``extra_body={...}``. They must be JSON-able: they are pinned into
            each run's manifest.

    Raises:
        ValueError: ``model`` is empty, ``max_tokens`` is below 1, or ``params`` names an
            argument the model supplies itself (``model``, ``messages``, ``system``,
            ``tools``, ``stream``).
        TypeError: ``params`` is not JSON-able.
    """

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        max_tokens: int = 1024,
        server_tools: list[dict[str, Any]] | None = None,
        stream: bool | None = None,
        **params: Any,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model id")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        clash = sorted(_RESERVED_PARAMS & params.keys())
        if clash:
            raise ValueError(f"params may not set {', '.join(clash)}: AnthropicModel supplies it")
        if server_tools is not None and not all(
            isinstance(t, dict) and isinstance(t.get("type"), str) for t in server_tools
        ):
            raise ValueError('server_tools must be tool definitions with a "type" each')
        try:
            json.dumps([params, server_tools], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"params must be JSON-able (they are pinned into runs): {exc}") from exc
        self._name = model
        self._params: dict[str, Any] = {"max_tokens": max_tokens, **copy.deepcopy(params)}
        self._server_tools: list[dict[str, Any]] = copy.deepcopy(server_tools or [])
        self._stream = stream
        self._sdk = SDKClient(model, client, self._build_client)

    @property
    def name(self) -> str:
        """The model id."""
        return self._name

    @property
    def params(self) -> dict[str, Any]:
        """``{"max_tokens": ..., **params}`` (and ``server_tools`` when there are any), as
        pinned into a run's manifest (a copy)."""
        pinned = copy.deepcopy(self._params)
        if self._server_tools:
            pinned["server_tools"] = copy.deepcopy(self._server_tools)
        return pinned

    def __repr__(self) -> str:
        return f"AnthropicModel({self._name!r}, params={self._params!r})"

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client this model built for itself, if any; later calls fail.

        A client passed in is left open: whoever made it closes it. Closing twice does nothing.

        Cancellation: closing is shielded, so the client is released even if the caller is
        cancelled meanwhile.
        """
        await self._sdk.aclose()

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        """Ask the model for the next assistant turn with one ``messages.create`` request.

        Args:
            system: the system prompt, or ``None`` to send none.
            messages: the conversation so far; it is not modified.
            tools: Anthropic tool definitions; none are sent when the list is empty.

        Returns:
            The reply: content blocks as plain JSON dicts (``None`` fields dropped), usage
            (``input_tokens`` includes tokens written to and read from the prompt cache) and
            ``stop_reason``.

        Raises:
            ModelError: the API refused the request (``reason`` holds the status, error type
                and message; ``transient`` for 408/409/429/5xx, with ``retry_after`` from the
                response), the connection failed or timed out, before the answer or in the
                middle of its stream, or the stream ended before ``message_stop`` (each
                ``transient``, with no usage: what a partial answer says of its tokens is a
                guess), the SDK refused the arguments (an unknown param) or found no
                credentials, or the model was closed.
            ModelResponseError: the answer's content is malformed (see ``check_reply_blocks``),
                or is not JSON (its body, or an event of its stream).

        Cancellation: the in-flight HTTP request (or the SDK's wait before a retry) is
            abandoned and the cancellation propagates unchanged. Nothing about the call is
            journaled, so a resumed run asks the model again.
        """
        client = await self._sdk.get()
        request: dict[str, Any] = {"model": self._name, "messages": messages, **self._params}
        if system is not None:
            request["system"] = system
        if tools or self._server_tools:
            request["tools"] = [*tools, *self._server_tools]

        import anthropic

        sink = text_sink.get()
        try:
            with stream_errors(self._name):
                if self._streams(sink is not None):
                    response = await self._streamed(client, request, sink)
                else:
                    response = await client.messages.create(**request)
        except anthropic.APIStatusError as exc:
            transient = (
                exc.status_code in _TRANSIENT_STATUS
                or exc.status_code >= 500
                or _error_type(exc) in _TRANSIENT_ERRORS  # also an error inside a 200 stream
            )
            raise ModelError(
                self._name,
                _status_reason(exc),
                transient=transient,
                retry_after=retry_after(exc.response.headers) if transient else None,
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ModelError(self._name, "request timed out", transient=True) from exc
        except anthropic.APIConnectionError as exc:
            raise connection_failed(self._name, exc.__cause__) from exc
        except anthropic.APIResponseValidationError as exc:
            raise ModelResponseError(self._name, f"response failed validation: {exc}") from exc
        except anthropic.AnthropicError as exc:
            raise ModelError(self._name, f"{type(exc).__name__}: {exc}") from exc
        except (TypeError, ValueError) as exc:
            # The SDK checks arguments and credentials before sending anything: a param the
            # installed SDK does not know, a client with no way to authenticate, a request it
            # will not send without streaming.
            raise ModelError(self._name, f"the SDK refused the request: {exc}") from exc
        return self._to_reply(response)

    def _streams(self, observed: bool) -> bool:
        """Whether to stream this model's answers (see ``stream`` in the class doc)."""
        if self._stream is not None:
            return self._stream
        if observed:
            return True
        max_tokens = int(self._params["max_tokens"])
        return max_tokens > _LONGEST_NONSTREAMING or max_tokens > _nonstreaming_limit(self._name)

    async def _streamed(
        self,
        client: anthropic.AsyncAnthropic,
        request: dict[str, Any],
        sink: Callable[[str], None] | None,
    ) -> anthropic.types.Message:
        """The whole answer of a streamed request; text goes to ``sink`` as it arrives.

        Nothing of a stream that breaks off is kept: the error is raised and the runtime asks
        again. The SDK's ``get_final_message`` is its snapshot of whatever arrived, whether
        ``message_stop`` did or not, so the stream's end is checked first (``StreamEnd``).
        """
        end = StreamEnd(self._name, "message_stop")
        async with client.messages.stream(**request) as stream:
            async for event in stream:
                if event.type == "message_stop":
                    end.saw("message_stop")
                elif sink is not None and event.type == "text":
                    sink(event.text)
            end.check()
            return await stream.get_final_message()

    async def check(self) -> str | None:
        """What stops this model from answering at all (no credentials), or ``None``.

        Builds the client if it is not built yet (nothing is sent). A supervisor asks once when
        it starts, so a worker without a key says so at once, not only in each run's reason.
        """
        try:
            await self._sdk.get()
        except ModelError as exc:
            return exc.reason
        return None

    async def _build_client(self) -> anthropic.AsyncAnthropic:
        import anthropic

        try:
            # No retries of the SDK's own: the runtime retries transient failures, journaled
            # and visible in the run's timeline, honouring retry-after.
            client = anthropic.AsyncAnthropic(max_retries=0)
        except anthropic.AnthropicError as exc:
            raise ModelError(self._name, f"cannot build an Anthropic client: {exc}") from exc
        if all(getattr(client, a, None) is None for a in ("api_key", "auth_token", "credentials")):
            with anyio.CancelScope(shield=True):
                await client.close()
            raise ModelError(
                self._name,
                "no Anthropic credentials: set ANTHROPIC_API_KEY or pass client=",
            )
        return client

    def _to_reply(self, response: anthropic.types.Message) -> ModelReply:
        usage = _usage(response)
        content = getattr(response, "content", None)
        if not isinstance(content, list):
            raise ModelResponseError(self._name, "response has no content list", usage=usage)
        blocks: list[object] = []
        for index, block in enumerate(content):
            if isinstance(block, dict):
                blocks.append(copy.deepcopy(block))
            elif hasattr(block, "model_dump"):
                blocks.append(block.model_dump(mode="json", exclude_none=True))
            else:
                raise ModelResponseError(
                    self._name, f"block {index}: unexpected {type(block).__name__}", usage=usage
                )
        try:
            checked = check_reply_blocks(self._name, blocks)
        except ModelResponseError as exc:  # the tokens were spent all the same
            raise ModelResponseError(self._name, exc.reason, usage=usage) from exc
        details = getattr(response, "stop_details", None)
        if details is not None and hasattr(details, "model_dump"):
            details = details.model_dump(mode="json", exclude_none=True)
        return ModelReply(
            content=checked,
            usage=usage,
            stop_reason=getattr(response, "stop_reason", None),
            stop_details=details if isinstance(details, dict) else None,
            response_id=response_id
            if isinstance(response_id := getattr(response, "id", None), str)
            else None,
        )


def _usage(response: anthropic.types.Message) -> Usage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return Usage()

    def tokens(field: str) -> int:
        value = getattr(usage, field, None)
        return value if isinstance(value, int) else 0

    return Usage(
        input_tokens=tokens("input_tokens"),
        output_tokens=tokens("output_tokens"),
        cache_creation_input_tokens=tokens("cache_creation_input_tokens"),
        cache_read_input_tokens=tokens("cache_read_input_tokens"),
    )


_LONGEST_NONSTREAMING = 21_333
"""The largest ``max_tokens`` the SDK sends without streaming: it refuses a request whose
expected time (an hour per 128,000 tokens) passes ten minutes (``_calculate_nonstreaming_timeout``
in the SDK's ``_base_client.py``)."""


def _nonstreaming_limit(model: str) -> float:
    """The SDK's own non-streaming ``max_tokens`` limit for ``model``, if it has one."""
    try:
        from anthropic._constants import MODEL_NONSTREAMING_TOKENS
    except ImportError:  # pragma: no cover - an SDK without the table
        return float("inf")
    limit = MODEL_NONSTREAMING_TOKENS.get(model)
    return float("inf") if limit is None else float(limit)


_TRANSIENT_STATUS = frozenset({408, 409, 429})
"""HTTP statuses worth asking again (with every 5xx, 529 ``overloaded_error`` among them)."""

_TRANSIENT_ERRORS = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)
"""API error types worth asking again, whatever the HTTP status (a stream that breaks off with
an ``error`` event arrives with the stream's status, 200)."""


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _status_reason(exc: anthropic.APIStatusError) -> str:
    # The body is {"type": "error", "error": {"type": ..., "message": ...}} for API errors; a
    # proxy in between may send anything, so fall back to the SDK's own message.
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    error_type = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    # An error event in an answer's stream comes with the stream's own HTTP 200.
    reason = f"HTTP {exc.status_code}" if exc.status_code != 200 else "an error in the stream"
    if isinstance(error_type, str):
        reason += f" {error_type}"
    reason += f": {message if isinstance(message, str) else exc.message}"
    request_id = exc.response.headers.get("request-id")
    if request_id:
        reason += f" (request-id {request_id})"
    return reason
