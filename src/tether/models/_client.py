"""The SDK client a model adapter calls: the one the application gave it, or one it builds on
first use, owns and closes; and what a failure of the connection under it is. Shared by
``AnthropicModel`` and ``OpenAIModel``."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

import anyio

from .._errors import ModelError, ModelResponseError


class _Closable(Protocol):
    async def close(self) -> Any: ...


C = TypeVar("C", bound=_Closable)


class SDKClient(Generic[C]):
    """``client`` if one was given (left open: whoever made it closes it), else what
    ``build()`` returns on first use (closed by ``aclose``). ``build`` raises ``ModelError``
    when it cannot make one (no credentials, say)."""

    def __init__(self, model: str, client: C | None, build: Callable[[], Awaitable[C]]) -> None:
        self._model = model
        self._client = client
        self._build = build
        self._owned = False
        self._closed = False

    async def get(self) -> C:
        """The client, built now if it is not yet.

        Raises:
            ModelError: the model was closed, or no client can be built.
        """
        if self._closed:
            raise ModelError(self._model, "the model was closed")
        if self._client is None:
            self._client = await self._build()
            self._owned = True
        return self._client

    async def aclose(self) -> None:
        """Close the client if it was built here; later ``get`` calls fail. Idempotent.

        Cancellation: closing is shielded, so the client is released even if the caller is
        cancelled meanwhile.
        """
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is not None and self._owned:
            with anyio.CancelScope(shield=True):
                await client.close()


@contextmanager
def stream_errors(model: str, *, host: str | None = None) -> Iterator[None]:
    """Around a request and the reading of its answer: the errors that reach an adapter from
    below either SDK, each as the ``ModelError`` it is (``host``: the server the client talks
    to, named in a connection failure, when the adapter knows it).

    - A failure of the transport (``transport_errors``): ``connection_failed``, transient; a
      timeout of it (a stream that stalled past the client's read timeout) says so.
    - A ``UnicodeDecodeError`` from an SDK's stream decoder, which decodes each event's bytes
      strictly: at the end of a stream cut inside a character. Transient too.
    - A ``json.JSONDecodeError``: a whole event (or body) that is not JSON. A malformed
      answer (``ModelResponseError``), asked again a bounded number of times.

    Raises:
        ModelError: one of those; any other exception passes unchanged.
    """
    try:
        yield
    except transport_errors() as exc:
        if isinstance(exc, _timeouts()):
            raise ModelError(model, f"request timed out{_detail(exc)}", transient=True) from exc
        raise connection_failed(model, exc, host=host) from exc
    except UnicodeDecodeError as exc:
        raise ModelError(
            model, f"the stream ended inside a character: {exc}", transient=True
        ) from exc
    except json.JSONDecodeError as exc:
        raise ModelResponseError(model, f"the answer is not JSON: {exc}") from exc


def transport_errors() -> tuple[type[BaseException], ...]:
    """What the HTTP stack under both SDKs raises when a connection fails mid-response.

    Both SDKs send through ``httpx2`` (the ``openai`` SDK also through a client of the older
    ``httpx`` package, when given one), whose transports (``httpcore2``, the aiohttp one) map
    their errors to its ``RequestError``: a connection reset, a body the server cut short
    (``RemoteProtocolError``), a read timeout. The ``openai`` SDK turns these into
    ``APIConnectionError`` while it reads a stream (its ``request_exceptions``, this same
    list); the ``anthropic`` SDK does so only while it sends a request, and lets them through
    as they are once a stream has begun. Either way they are the network's fault, never the
    run's: ``connection_failed`` is the error for them.
    """
    import ssl

    import httpx2

    errors: tuple[type[BaseException], ...] = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
    legacy = sys.modules.get("httpx")
    if legacy is not None and isinstance(getattr(legacy, "RequestError", None), type):
        errors = (*errors, legacy.RequestError)
    return errors


def _timeouts() -> tuple[type[BaseException], ...]:
    import httpx2

    legacy = sys.modules.get("httpx")
    if legacy is not None and isinstance(getattr(legacy, "TimeoutException", None), type):
        return (httpx2.TimeoutException, legacy.TimeoutException)
    return (httpx2.TimeoutException,)


def connection_failed(
    model: str, cause: BaseException | None, *, host: str | None = None
) -> ModelError:
    """The transient ``ModelError`` for a connection that failed (``cause``: the transport's
    error, when known; ``host``: the server, ``host:port``, when known), before or in the
    middle of an answer: asked again, with backoff."""
    where = f" (server {host})" if host else ""
    return ModelError(model, f"connection failed{_detail(cause)}{where}", transient=True)


def _detail(cause: BaseException | None) -> str:
    """``": ReadError: ..."``. A transport's error often has no text of its own, only errors it
    wraps (an ``httpx2.ReadError`` of an ``httpcore2.ReadError`` of a ``BrokenResourceError``):
    then the first of them that has some text, or else the innermost one, says what happened."""
    if cause is None:
        return ""
    inner: BaseException = cause
    seen = {id(cause)}
    while not str(inner) and (nxt := inner.__cause__ or inner.__context__) is not None:
        if id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    said = f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__
    if inner is cause:
        return f": {said}"
    return f": {type(cause).__name__}: {said}"
