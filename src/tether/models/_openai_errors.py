"""Which errors of OpenAI's APIs are worth asking again, and which need a person.

``OpenAIModel`` decides here, and so do the agents of the OpenAI Agents SDK integration, whose
models reach the same APIs through the same ``openai`` SDK, so that a run fails alike on
either (a pydantic-ai agent's HTTP errors go by the same statuses and codes,
``transient_status``):

- an HTTP error answer (``status_error``) is ``transient`` for 408, 409, 429 and every 5xx,
  with the wait the server asked for (``retry-after-ms``, ``retry-after``), except a 429 that
  says the account's quota is used up (``insufficient_quota``, ``billing_hard_limit_reached``):
  waiting will not help. Anything else (400, 401, 403, 404, 422) parks the run for a person;
- an error that breaks a stream off, or a response that ``failed`` (``failure``), is transient
  when its code is a server-side one (``server_error``, ``rate_limit_exceeded``, ...) or it
  has none.

Each reason keeps what the API said: the status and the error's code, its message, the
request's id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._errors import ModelError
from ._retry_after import retry_after

if TYPE_CHECKING:
    import openai

TRANSIENT_STATUS = frozenset({408, 409, 429})
"""HTTP statuses worth asking again (with every 5xx)."""

PERMANENT_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
"""Error codes that come with a 429 but will not go away by waiting: a person must act."""

TRANSIENT_CODES = frozenset(
    {"server_error", "rate_limit_exceeded", "vector_store_timeout", "timeout", "overloaded"}
)
"""Error codes of a stream broken off, or a response that failed, worth asking again."""


def transient_status(status: int, code: object) -> bool:
    """Whether an HTTP error answer with ``status`` and the API's error ``code`` is worth
    asking again: 408, 409, 429 and every 5xx, unless the code says waiting will not help."""
    return (status in TRANSIENT_STATUS or status >= 500) and code not in PERMANENT_CODES


def status_error(model: str, exc: openai.APIStatusError) -> ModelError:
    """The error for an HTTP error answer, classified by its status and code."""
    transient = transient_status(exc.status_code, exc.code)
    return ModelError(
        model,
        _status_reason(exc),
        transient=transient,
        retry_after=retry_after(exc.response.headers) if transient else None,
    )


def failure(model: str, what: str, code: object, message: str) -> ModelError:
    """The error for a stream broken off by an error, or a failed response, classified by its
    code; ``what`` says which (``"the stream broke off"``, ``"the response failed"``)."""
    transient = code is None or code in TRANSIENT_CODES
    reason = f"{what}: {code}: {message}" if code is not None else f"{what}: {message}"
    return ModelError(model, reason, transient=transient)


def _status_reason(exc: openai.APIStatusError) -> str:
    # The SDK hands over the body's "error" object: {"message", "type", "param", "code"}; a
    # proxy in between may send anything, so fall back to the SDK's own message.
    body = exc.body if isinstance(exc.body, dict) else {}
    kind = body.get("code") or body.get("type")
    message = body.get("message")
    reason = f"HTTP {exc.status_code}"
    if isinstance(kind, str):
        reason += f" {kind}"
    reason += f": {message if isinstance(message, str) else exc.message}"
    if exc.request_id:
        reason += f" (request-id {exc.request_id})"
    if exc.status_code == 404 and not isinstance(kind, str):
        reason += _no_endpoint(str(exc.response.request.url))
    return reason


def _no_endpoint(url: str) -> str:
    """What a 404 that no API error explains says: the server has nothing at ``url``, most
    often a base URL without its ``/v1`` (``http://localhost:11434`` for Ollama's
    ``http://localhost:11434/v1``)."""
    said = f"; the server has nothing at {url}"
    if "/v1/" not in urlsplit(url).path:
        said += " (does the base URL lack its /v1?)"
    return said
