"""The SDK client a model adapter calls: the one the application gave it, or one it builds on
first use, owns and closes. Shared by ``AnthropicModel`` and ``OpenAIModel``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import anyio

from .._errors import ModelError


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
