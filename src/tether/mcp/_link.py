"""One live session with an MCP server, and how its loss reaches the calls in flight.

A session's transport (a child process over stdio, or HTTP requests and event streams) lives
in task groups that must be entered and left by one task, so each session is held by a task
of its ``MCPServer``: ``hold`` opens the transport and the ``ClientSession``, initializes it,
lists the tools, reports the ``Link`` as started and waits until the link is lost or closed.

Calls run in their own tasks (the runs' tool attempts) and register a cancel scope with the
link while they wait for an answer. Whatever ends the session first calls ``Link.lose``,
which cancels every waiting call: each then knows its outcome is unknown (its request may have
reached the server) instead of waiting forever. That matters on HTTP, where the SDK drops a
response stream that breaks without telling the request that waited for it: the HTTP client
here runs on a transport (``WatchedTransport``) that calls ``lose`` when a request or a
response stream fails at the transport level.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from mcp import ClientSession, types

from .._errors import ToolUnavailableError

log = logging.getLogger("tether.mcp")

LAST_WORDS = 5
"""Lines of a stdio server's standard error kept for the error of a session that failed."""

IDEMPOTENCY_KEY_META = "tether/idempotency-key"
"""The ``_meta`` key of every ``tools/call`` request that carries the call's idempotency key
(``ToolContext.idempotency_key``: ``RUN_ID:CALL_ID``, the same on every attempt). A server
that records the keys it has served can answer a repeated call without repeating its effect.
"""


@dataclass(eq=False)
class Link:
    """One session with a server: its tools as listed when it opened, and whether it is lost."""

    server: str
    session: ClientSession | None = None
    tools: dict[str, types.Tool] = field(default_factory=dict)
    lost: str | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)
    waiting: set[anyio.CancelScope] = field(default_factory=set)
    unsent: set[str] = field(default_factory=set)  # keys of calls whose request never left
    refused: set[str] = field(default_factory=set)  # tools whose changed contract was logged
    last_words: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_WORDS))
    """A stdio server's last lines on its standard error (for the error of a session that
    could not be opened: why the server stopped)."""

    def lose(self, why: str) -> None:
        """Mark the session unusable (idempotent): waiting calls are cancelled, its holder
        closes the transport, and the next call opens a new session."""
        if self.lost is None:
            self.lost = why
            log.info("MCP server %s: session ended (%s)", self.server, why)
        for scope in self.waiting:
            scope.cancel()
        self.ended.set()


async def list_tools(session: ClientSession) -> dict[str, types.Tool]:
    """Every tool the server lists, following its pages."""
    tools: dict[str, types.Tool] = {}
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            tools[tool.name] = tool
        cursor = page.nextCursor
        if not cursor:
            return tools


class WatchedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that reports a request or response stream that fails to ``broken``.

    A GET event stream that times out while idle is not a failure (the SDK opens it again);
    anything else at the transport level (a refused or reset connection, a stream cut short
    by a server that died) is.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        broken: Callable[[str], None],
        unsent: Callable[[str], None],
    ) -> None:
        self._inner = inner
        self._broken = broken
        self._unsent = unsent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                key = _call_key(request)  # a call whose request never reached the server
                if key is not None:
                    self._unsent(key)
            self._report(request, exc)
            raise
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_WatchedStream(response.stream, lambda exc: self._report(request, exc)),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _report(self, request: httpx.Request, exc: httpx.TransportError) -> None:
        if request.method == "GET" and isinstance(exc, httpx.TimeoutException):
            return
        self._broken(f"{request.method} {request.url.path}: {type(exc).__name__}: {exc}")


class _WatchedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, broken: Callable[[httpx.TransportError], None]) -> None:
        self._inner = inner
        self._broken = broken

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.TransportError as exc:
            self._broken(exc)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def _call_key(request: httpx.Request) -> str | None:
    """The idempotency key a ``tools/call`` request carries in its ``_meta``, if any."""
    try:
        body = json.loads(request.content)
        key = body["params"]["_meta"][IDEMPOTENCY_KEY_META]
    except (ValueError, KeyError, TypeError, httpx.RequestNotRead):
        return None
    return key if isinstance(key, str) and body.get("method") == "tools/call" else None


def describe(exc: BaseException) -> str:
    """An exception in words, the first leaf of an exception group standing for the group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MCPServerUnavailableError(ToolUnavailableError):
    """No session could be opened with an MCP server (not started, not answering, refused):
    nothing was sent. Named for the server, whose tools all share the cause."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(tool, reason)
        self.args = (f"MCP server {tool!r}: {reason}",)
