"""The strict fakes on a real socket, and streams that end early.

``served(api)`` serves a fake (``MessagesAPI``, ``ChatAPI``, ``ResponsesAPI``: a handler of
``httpx2.Request``) over HTTP/1.1 on 127.0.0.1, so the SDK reaches it through its real
transport: a connection pool, a TCP socket, a chunked body parsed as it arrives. A streamed
answer (``text/event-stream``) is sent one event per chunk, its JSON with text as UTF-8 (not
``\\u`` escapes), as the APIs send them; any other answer whole, with its ``Content-Length``.
Connections are kept alive between requests.

``Server.cut(Cut(...))`` ends the next streamed answer early, the ways a network, a proxy or a
server restart ends one, at the event ``Cut.at`` picks (that event and the rest are not sent):

- ``"eof"``: the response ends cleanly, with its last chunk: nothing at the HTTP level says
  that anything is missing (a proxy's idle timeout, a load balancer draining, a restart);
- ``"close"``: the server closes the connection in the middle of the chunked body (a FIN,
  no last chunk): the client's HTTP layer sees an incomplete body;
- ``"reset"``: the connection is reset (an RST: ``SO_LINGER`` 0, then close);
- ``"error"``: ``Cut.error`` (the API's own ``error`` event, built from the events sent) is
  sent in place of the rest, and the response ends cleanly, as the APIs break a stream off;
- ``"stall"``: nothing more is sent, and the connection is held open until the client gives
  up on it (its read timeout) and closes it.

With ``inside``, the first bytes of the event at the cut are sent before it ends (``halfway``,
or ``within(text)``: up to the first byte of ``text``, to cut inside a multi-byte character).

What was sent of each streamed answer, and how it ended, is kept in ``Server.sent``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import httpx2
from anyio.abc import SocketAttribute

How = Literal["eof", "close", "reset", "error", "stall"]


@dataclass(frozen=True)
class Event:
    """One server-sent event of an answer: its name (``None`` when it has none), its data
    (parsed JSON, or the text when it is not JSON: ``[DONE]``) and its bytes on the wire."""

    name: str | None
    data: Any
    raw: bytes

    @property
    def type(self) -> str | None:
        """The event's ``type`` field (Messages and Responses events carry one), its data when
        that is not JSON (``[DONE]``), else its name."""
        if isinstance(self.data, dict) and isinstance(self.data.get("type"), str):
            return str(self.data["type"])
        if isinstance(self.data, str):
            return self.data
        return self.name


def parse_events(body: bytes) -> list[Event]:
    """An event stream split into its events (each ended by a blank line)."""
    events: list[Event] = []
    for chunk in body.split(b"\n\n"):
        if not chunk.strip():
            continue
        name: str | None = None
        data: list[str] = []
        for line in chunk.decode().split("\n"):
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        text = "\n".join(data)
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            events.append(Event(name, text, chunk + b"\n\n"))
            continue
        head = f"event: {name}\n" if name is not None else ""
        raw = f"{head}data: {json.dumps(parsed, ensure_ascii=False)}\n\n".encode()
        events.append(Event(name, parsed, raw))
    return events


Picker = Callable[[Sequence[Event]], int]
"""Given an answer's events, the index of the first one not sent."""


def before(kind: str) -> Picker:
    """At the first event of type ``kind`` (``"message_stop"``, ``"response.completed"``):
    everything before it is sent."""

    def pick(events: Sequence[Event]) -> int:
        for index, event in enumerate(events):
            if event.type == kind:
                return index
        raise AssertionError(f"the answer has no {kind!r} event: {[e.type for e in events]}")

    return pick


def after(match: Callable[[Event], bool], count: int = 1) -> Picker:
    """Right after the ``count``-th event ``match`` accepts."""

    def pick(events: Sequence[Event]) -> int:
        seen = 0
        for index, event in enumerate(events):
            seen += match(event)
            if seen == count:
                return index + 1
        raise AssertionError(f"the answer has {seen} matching events, not {count}")

    return pick


def halfway(raw: bytes) -> int:
    """Half of an event's bytes."""
    return len(raw) // 2


def within(text: str) -> Callable[[bytes], int]:
    """An event's bytes up to the first byte of ``text`` in it, included."""

    def count(raw: bytes) -> int:
        return raw.index(text.encode()) + 1

    return count


@dataclass(frozen=True)
class Cut:
    """How the next streamed answer ends early (see the module doc)."""

    at: Picker
    how: How = "eof"
    inside: Callable[[bytes], int] | None = None
    error: Callable[[Sequence[Event]], bytes] | None = None

    def __post_init__(self) -> None:
        if (self.how == "error") != (self.error is not None):
            raise ValueError("an error cut needs its error event, and only it")


@dataclass(frozen=True)
class Sent:
    """What went out of one streamed answer: its events (all of them unless ``cut``)."""

    events: list[Event]
    cut: Cut | None


@dataclass
class Server:
    """A fake served on a socket; ``url`` is its base (``http://127.0.0.1:PORT``)."""

    handler: Callable[[httpx2.Request], httpx2.Response]
    url: str = ""
    cuts: list[Cut] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    connections: int = 0

    def cut(self, *cuts: Cut) -> None:
        """End the next streamed answers early, one cut each, in order."""
        self.cuts.extend(cuts)

    async def serve(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        reader = _Reader(stream)
        async with stream:
            try:
                while (request := await reader.request(self.url)) is not None:
                    if not await self._answer(stream, self.handler(request)):
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                return  # the client went away: it closes a response it stopped reading

    async def _answer(self, stream: anyio.abc.SocketStream, response: httpx2.Response) -> bool:
        """Send ``response``; returns whether the connection stays open."""
        body = response.read()
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await stream.send(
                _head(response.status_code, [*headers, ("content-length", str(len(body)))])
            )
            await stream.send(body)
            return True
        await stream.send(_head(response.status_code, [*headers, ("transfer-encoding", "chunked")]))
        events = parse_events(body)
        cut = self.cuts.pop(0) if self.cuts else None
        if cut is None:
            self.sent.append(Sent(events, None))
            for event in events:
                await stream.send(_chunk(event.raw))
            await stream.send(b"0\r\n\r\n")
            return True
        end = cut.at(events)
        self.sent.append(Sent(events[:end], cut))
        for event in events[:end]:
            await stream.send(_chunk(event.raw))
        if cut.inside is not None:
            raw = events[end].raw
            await stream.send(_chunk(raw[: cut.inside(raw)]))
        if cut.how == "close":
            return False
        if cut.how == "stall":
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    await stream.receive()
            return False
        if cut.how == "reset":
            raw_socket = stream.extra(SocketAttribute.raw_socket)
            raw_socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if cut.error is not None:
            await stream.send(_chunk(cut.error(events[:end])))
        await stream.send(b"0\r\n\r\n")
        return True


@asynccontextmanager
async def served(handler: Callable[[httpx2.Request], httpx2.Response]) -> AsyncIterator[Server]:
    """Serve ``handler`` on 127.0.0.1 until the block ends (see the module doc)."""
    server = Server(handler)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    server.url = f"http://127.0.0.1:{port}"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.serve)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


class _Reader:
    """Reads HTTP/1.1 requests off a connection."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def _more(self) -> bool:
        try:
            self._buffer += await self._stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return False
        return True

    async def request(self, base: str) -> httpx2.Request | None:
        """The next request, or ``None`` when the client closed the connection."""
        while b"\r\n\r\n" not in self._buffer:
            if not await self._more():
                return None
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        headers = [tuple(f.split(":", 1)) for f in fields]
        pairs = [(k.strip(), v.strip()) for k, v in headers]
        length = int(next((v for k, v in pairs if k.lower() == "content-length"), "0"))
        while len(self._buffer) < length:
            if not await self._more():
                return None
        content, self._buffer = self._buffer[:length], self._buffer[length:]
        return httpx2.Request(method, base + target, headers=pairs, content=content)


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    phrase = httpx2.codes.get_reason_phrase(status)
    lines = [f"HTTP/1.1 {status} {phrase}", *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"
