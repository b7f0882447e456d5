"""Serving the console with uvicorn: a socket bound first, signals handled by us, and a
deadline for a request's headers.

Three things uvicorn does not do for ``tether serve``:

- A port in use is an ``OSError`` raised before anything starts (the socket is bound here and
  handed to uvicorn), not a ``SystemExit`` deep in its start-up.
- ``SIGTERM`` and ``SIGINT`` end the server gracefully and ``serve`` returns; uvicorn's own
  handlers would re-raise the signal once it stopped, so the process died of it (exit 143).
- A client has ``header_timeout`` seconds to send a request's headers, counted from the
  connection (or from the end of the previous response on a kept-alive one), however slowly
  it trickles them in: uvicorn has no such deadline, so a few hundred slow connections could
  be held open for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0
"""Seconds a client has to send a request's headers (``tether serve --header-timeout``)."""


class _Server(uvicorn.Server):
    """uvicorn's server, with the signals left to ``serve``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _protocol(header_timeout: float) -> type[asyncio.Protocol]:
    class HeaderDeadline(H11Protocol):
        """h11, with a deadline for each request's headers (see the module's docstring)."""

        _deadline: asyncio.TimerHandle | None = None
        _waiting_since: object = None  # the cycle the deadline was set after (None: none yet)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._deadline is not None and self.cycle is not self._waiting_since:
                self._disarm()  # a request's headers came in whole: it is being answered

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request is being answered already
            self._waiting_since = self.cycle
            self._deadline = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.cycle is self._waiting_since and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``.

    Raises:
        OSError: it cannot be bound (the port is in use, the address is not this host's).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(
    application: ASGIApp,
    sock: socket.socket,
    *,
    header_timeout: float = HEADER_TIMEOUT,
    on_listening: Callable[[str, int], None] | None = None,
    **config: Any,
) -> bool:
    """Serve ``application`` on the listening socket ``sock`` until ``SIGTERM`` or ``SIGINT``
    (a second ``SIGINT`` stops at once); return whether it started (``False``: the
    application's start-up failed, as uvicorn logged). ``config`` goes to ``uvicorn.Config``.

    On cancellation: the server stops at once.
    """
    server = _Server(
        uvicorn.Config(
            application,
            http=_protocol(header_timeout),
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=2,
            **config,
        )
    )
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                async for received in signals:
                    if server.should_exit and received == signal.SIGINT:
                        server.force_exit = True
                    server.should_exit = True

            tg.start_soon(stop_on_signal)
            if on_listening is not None:
                tg.start_soon(_tell_when_listening, server, on_listening)
            try:
                await server.serve(sockets=[sock])
            finally:
                tg.cancel_scope.cancel()
    return bool(server.started)


async def _tell_when_listening(server: uvicorn.Server, tell: Callable[[str, int], None]) -> None:
    # uvicorn sets a flag once its sockets listen, and offers no event to wait on.
    while not server.started and not server.should_exit:  # noqa: ASYNC110
        await anyio.sleep(0.05)
    if server.started:
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        tell(str(host), int(port))
