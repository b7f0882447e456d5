"""``OpenAIModel``: the ``Model`` protocol on the official ``openai`` SDK, for OpenAI's API and
for servers that speak it (vLLM, Ollama, LiteLLM's proxy, llama.cpp's server).

The run's conversation stays Anthropic-shaped in the journal; each call translates it to the
chosen API (``_openai_chat``: Chat Completions; ``_openai_responses``: the Responses API) and
the answer back into content blocks the runtime understands. The SDK is imported only when a
model is first called (or a client is handed in) and is an optional extra (``pip install
'tether[openai]'``).

Errors become ``ModelError`` at this boundary, classified as ``AnthropicModel`` classifies
them: connection errors (before an answer or in the middle of its stream), timeouts, a stream
that ended before the API said the answer was complete (``StreamEnd``: a finish reason and
``[DONE]``, or a terminal ``response.*`` event) and HTTP 408/409/429/5xx are ``transient``
(with the server's ``retry-after``), except a 429 that says the account's quota is used up; an
error that breaks a stream off, or a response that ``failed``, is transient when its code is a
server-side one (``server_error``, ``rate_limit_exceeded``, ...) or it has none (the API's
errors are classified in ``_openai_errors``). Anything else (400, 401, 403, 404, 422, missing
credentials, arguments the SDK refuses, a conversation the API cannot take) parks the run for
a person. An answer with a field of a type the API never sends there is a malformed one
(``ModelResponseError``, naming the field). A client built here makes no retries of its own.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Literal, final
from urllib.parse import urlsplit

from .._errors import ModelError, ModelResponseError
from . import _openai_chat, _openai_responses
from ._base import ModelReply, StreamEnd, SystemPrompt, check_reply_blocks, text_sink
from ._client import SDKClient, connection_failed, stream_errors
from ._messages import Message, ToolDefinition
from ._openai_errors import failure, status_error
from ._openai_translate import Malformed, Untranslatable, object_at, text_at, wrong

if TYPE_CHECKING:
    from types import TracebackType

    import openai

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_FINAL = "a terminal event (response.completed, .incomplete or .failed)"


@final
class OpenAIModel:
    """A model reached through ``openai.AsyncOpenAI``: OpenAI's own, or any server that speaks
    its Chat Completions or Responses API.

    Use it as an async context manager (or call ``aclose``) when it builds its own client, so
    the client's connection pool is released.

    Args:
        model: the model id, e.g. ``"gpt-5-mini"`` or ``"llama3.1"``; it is also this model's
            ``name``.
        client: the SDK client to use. By default one is built on the first call from the
            environment (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...) and the arguments
            below, with ``max_retries=0`` (the runtime retries); pass your own to set
            timeouts, headers or retries of the SDK's own.
        api: ``"chat"`` for Chat Completions (what compatible servers all speak), or
            ``"responses"`` for the Responses API (OpenAI's; reasoning items are kept and sent
            back).
        base_url: the server, e.g. ``"http://localhost:11434/v1"`` for Ollama.
        api_key: the key to send; a local server that checks none still needs some text
            here (``"ollama"``). Never pinned or journaled.
        stream: ``True`` always streams the answer, ``False`` never does; ``None`` (the
            default) streams when the supervisor has a text observer (``on_text``). A
            streamed answer is journaled once, whole, when the stream ends as the API ends an
            answer (a finish reason and ``[DONE]``; a terminal ``response.*`` event); a stream
            that ends any other way is a transient error. Streaming also keeps a long answer
            (a reasoning model at high effort) from running into the client's read timeout.
        **params: further arguments of ``chat.completions.create`` or ``responses.create``
            (``temperature``, ``max_completion_tokens`` / ``max_output_tokens``,
            ``reasoning_effort`` / ``reasoning``, ``tool_choice``, ``parallel_tool_calls``,
            ``store``, ``include``, ...; ``extra_body={...}`` for a server's own fields). They
            must be JSON-able: they are pinned into each run's manifest. With ``api=
            "responses"`` and ``store=False``, ``include=["reasoning.encrypted_content"]`` is
            sent unless ``include`` is given: reasoning items go back in every request, and a
            server that stored nothing can only read them from their encrypted content.

    Raises:
        ValueError: ``model`` is empty, ``api`` is neither ``"chat"`` nor ``"responses"``,
            ``client`` is given with ``base_url`` or ``api_key``, or ``params`` names an
            argument the model supplies itself (``model``, ``messages`` / ``input``,
            ``tools``, ``stream``, ...).
        TypeError: ``params`` is not JSON-able.
    """

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        api: Literal["chat", "responses"] = "chat",
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool | None = None,
        **params: Any,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model id")
        if api not in ("chat", "responses"):
            raise ValueError(f'api must be "chat" or "responses", got {api!r}')
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give client= or base_url= and api_key=, not both")
        shape = _openai_chat if api == "chat" else _openai_responses
        clash = sorted(({"model"} | shape.RESERVED_PARAMS) & params.keys())
        if clash:
            raise ValueError(f"params may not set {', '.join(clash)}: OpenAIModel supplies it")
        try:
            json.dumps(params, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"params must be JSON-able (they are pinned into runs): {exc}") from exc
        self._name = model
        self._api = api
        self._shape = shape
        self._params: dict[str, Any] = copy.deepcopy(params)
        self._base_url = base_url
        self._api_key = api_key
        self._stream = stream
        if client is not None:
            where = str(client.base_url)
        else:
            where = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self._host = urlsplit(where).netloc.rpartition("@")[2].lower()
        self._sdk = SDKClient(model, client, self._build_client)

    @property
    def name(self) -> str:
        """The model id."""
        return self._name

    @property
    def params(self) -> dict[str, Any]:
        """``{"api": ..., "host": ..., **params}``, as pinned into a run's manifest (a copy):
        a run resumed against another API or server stops as ``needs_attention``."""
        return {"api": self._api, "host": self._host, **copy.deepcopy(self._params)}

    def __repr__(self) -> str:
        return f"OpenAIModel({self._name!r}, params={self.params!r})"

    async def __aenter__(self) -> OpenAIModel:
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
        """Ask the model for the next assistant turn with one request.

        Args:
            system: the system prompt, or ``None`` to send none.
            messages: the conversation so far (Anthropic-shaped); it is not modified.
            tools: Anthropic tool definitions, sent as function tools.

        Returns:
            The reply, translated into content blocks (see ``_openai_chat`` and
            ``_openai_responses``), with usage (cached input tokens apart from
            ``input_tokens``, reasoning tokens recorded) and the runtime's ``stop_reason``.

        Raises:
            ModelError: the API refused the request (``transient`` for 408/409/429/5xx, with
                ``retry_after``), the connection failed or timed out, a stream broke off or
                ended before the API said the answer was complete (``transient``, with no
                usage), the response failed, the SDK refused the arguments or found no
                credentials, the conversation holds something this API cannot take, or the
                model was closed.
            ModelResponseError: the answer is malformed (a field holds a value of a type
                the API never sends there: the reason names it by its path), or is not JSON.

        Cancellation: the in-flight HTTP request is abandoned and the cancellation propagates
            unchanged. Nothing about the call is journaled, so a resumed run asks again.
        """
        client = await self._sdk.get()
        sink = text_sink.get()
        streams = self._stream if self._stream is not None else sink is not None
        try:
            request = self._shape.request(
                self._name, system, messages, tools, self._params, stream=streams
            )
        except Untranslatable as exc:
            raise ModelError(self._name, f"cannot send this conversation: {exc}") from exc

        import openai

        try:
            with stream_errors(self._name, host=self._host):
                if self._api == "chat":
                    answer = await self._chat(client, request, sink)
                else:
                    answer = await self._responses(client, request, sink)
        except openai.APIStatusError as exc:
            raise status_error(self._name, exc) from exc
        except openai.APITimeoutError as exc:
            raise ModelError(self._name, "request timed out", transient=True) from exc
        except openai.APIConnectionError as exc:
            raise connection_failed(self._name, exc.__cause__, host=self._host) from exc
        except openai.APIResponseValidationError as exc:
            raise ModelResponseError(self._name, f"response failed validation: {exc}") from exc
        except openai.APIError as exc:  # an error event that broke a stream off
            code = exc.code or exc.type
            raise failure(self._name, "the stream broke off", code, exc.message) from exc
        except openai.OpenAIError as exc:
            raise ModelError(self._name, f"{type(exc).__name__}: {exc}") from exc
        except Malformed as exc:  # a field of the answer that holds the wrong type
            raise ModelResponseError(self._name, str(exc)) from exc
        try:
            return ModelReply(
                content=check_reply_blocks(self._name, answer.content),
                usage=answer.usage,
                stop_reason=answer.stop_reason,
                stop_details=answer.stop_details,
                response_id=answer.response_id,
            )
        except ModelResponseError as exc:  # the tokens were spent all the same
            raise ModelResponseError(self._name, exc.reason, usage=answer.usage) from exc

    async def _chat(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        sink: Callable[[str], None] | None,
    ) -> ModelReply:
        if not request.get("stream"):
            create: Any = client.chat.completions.create
            with _sdk_refusal(self._name):
                completion = await create(**request)
            return _openai_chat.reply(self._name, _plain(completion, "the answer"))
        # The SDK's stream of chunks ends alike at [DONE] and at an EOF that came first, and
        # which one it was is what says whether the answer is whole: read its events here.
        streamed = _openai_chat.StreamedAnswer()
        events = _openai_chat.EventData()
        end = StreamEnd(self._name, _openai_chat.FINISHED, _openai_chat.DONE)
        create_streaming: Any = client.chat.completions.with_streaming_response.create
        done = False
        async with AsyncExitStack() as stack:
            with _sdk_refusal(self._name):
                response = await stack.enter_async_context(create_streaming(**request))
            async for piece in response.iter_bytes():
                try:
                    ended = events.feed(piece)
                except UnicodeDecodeError as exc:
                    raise ModelResponseError(self._name, f"the stream is not UTF-8: {exc}") from exc
                for data in ended:
                    if done := data.startswith(_openai_chat.DONE):
                        end.saw(_openai_chat.DONE)
                        break  # nothing after it is read, nor waited for
                    self._chunk(streamed, data, sink)
                    if streamed.finished:
                        end.saw(_openai_chat.FINISHED)
                if done:
                    break
        end.check()
        return _openai_chat.reply(self._name, streamed.completion())

    def _chunk(
        self, streamed: _openai_chat.StreamedAnswer, data: str, sink: Callable[[str], None] | None
    ) -> None:
        """Take one streamed chunk (its event's data) into ``streamed``; its text to ``sink``.

        Raises:
            ModelError: the chunk is the error the API breaks a stream off with.
            ModelResponseError: the chunk is not a JSON object.
            Malformed: a field of it holds a value of the wrong type.
        """
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ModelResponseError(self._name, f"a streamed chunk is not an object: {data}")
        error = chunk.get("error")
        if error:  # the API breaks a stream off with an error in place of a chunk
            error = error if isinstance(error, dict) else {"message": str(error)}
            code = error.get("code") or error.get("type")
            message = str(error.get("message") or "an error occurred during streaming")
            raise failure(self._name, "the stream broke off", code, message)
        added = streamed.add(chunk)
        if added and sink is not None:
            sink(added)

    async def _responses(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        sink: Callable[[str], None] | None,
    ) -> ModelReply:
        create: Any = client.responses.create
        with _sdk_refusal(self._name):
            sent = await create(**request)
        if request.get("stream"):
            response = await self._streamed_response(sent, sink)
        else:
            response = _plain(sent, "the response")
        if response.get("status") == "failed":
            error = object_at(response.get("error"), "error")
            message = text_at(error.get("message"), "error.message") or ""
            raise failure(self._name, "the response failed", error.get("code"), message)
        return _openai_responses.reply(self._name, response)

    async def _streamed_response(
        self, stream: Any, sink: Callable[[str], None] | None
    ) -> dict[str, Any]:
        """The response a stream of Responses events ends with; its text goes to ``sink``."""
        end = StreamEnd(self._name, _FINAL)
        response: dict[str, Any] = {}
        async with stream:
            async for event in stream:
                kind = getattr(event, "type", None)
                if kind == "response.output_text.delta" and sink is not None:
                    sink(str(event.delta))
                elif kind == "error":
                    code = getattr(event, "code", None)
                    message = str(getattr(event, "message", ""))
                    raise failure(self._name, "the stream broke off", code, message)
                elif kind in _FINAL_EVENTS:
                    end.saw(_FINAL)
                    response = _plain(event.response, f"the {kind} event's response")
                    break
        end.check()
        return response

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

    async def _build_client(self) -> openai.AsyncOpenAI:
        try:
            import openai
        except ImportError as exc:
            raise ModelError(
                self._name, "the openai package is not installed: pip install 'tether[openai]'"
            ) from exc
        try:
            # No retries of the SDK's own: the runtime retries transient failures, journaled
            # and visible in the run's timeline, honouring retry-after.
            client = openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, max_retries=0
            )
        except openai.OpenAIError as exc:
            if "credentials" in str(exc).lower() or "api_key" in str(exc):
                reason = "no OpenAI credentials: set OPENAI_API_KEY or pass api_key= or client="
            else:
                reason = f"cannot build an OpenAI client: {exc}"
            raise ModelError(self._name, reason) from exc
        return client


@contextmanager
def _sdk_refusal(model: str) -> Iterator[None]:
    """Around handing a request to the SDK, which checks its arguments before it sends
    anything: a ``TypeError`` or ``ValueError`` then is the SDK refusing them (a param it
    does not know). Only the sending: what reading the answer raises is the answer's.

    Raises:
        ModelError: (permanent) the SDK refused the request.
    """
    try:
        yield
    except (TypeError, ValueError) as exc:
        raise ModelError(model, f"the SDK refused the request: {exc}") from exc


def _plain(model: Any, what: str) -> dict[str, Any]:
    """An SDK response object as plain JSON, extra fields (a server's own) included; ``what``
    names it, should the server have sent something that is not an object.

    Raises:
        Malformed: the server's answer is not a JSON object (the SDK keeps it as it came).
    """
    if isinstance(model, dict):
        return model
    if not hasattr(model, "model_dump"):
        raise wrong(what, "an object", model)
    # warnings off: a compatible server may send a value outside the SDK's literals (a finish
    # reason of its own), which the SDK keeps as it came.
    plain: dict[str, Any] = model.model_dump(mode="json", exclude_none=True, warnings=False)
    return plain
