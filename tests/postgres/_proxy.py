"""A TCP proxy in front of PostgreSQL that cuts connections at chosen statements.

A client message carrying ``CUT-AFTER-<tag>.`` is forwarded, and then the connection is cut before
the server's reply comes back: the statement committed, the client cannot know. A message
carrying ``CUT-BEFORE-<tag>.`` is not forwarded: the connection is cut and the statement never
ran. Each marker cuts once, so a client that sends the statement again gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

_MARK = re.compile(rb"CUT-(AFTER|BEFORE)-[a-z0-9-]+\.")


class CuttingProxy:
    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.cut: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._muted: set[asyncio.Event] = set()

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", self.target)
        cut = asyncio.Event()
        up = asyncio.ensure_future(self._up(c_reader, s_writer, cut))
        down = asyncio.ensure_future(self._down(s_reader, c_writer, cut))
        self._pumps |= {up, down}
        try:
            await cut.wait()
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            self._pumps -= {up, down}
            for writer in (c_writer, s_writer):
                writer.transport.abort()

    async def _up(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                match = _MARK.search(data)
                if match and match.group(0) not in self.cut:
                    self.cut.append(match.group(0))
                    self._muted.add(cut)  # nothing more reaches the client
                    if match.group(1) == b"AFTER":
                        writer.write(data)
                        await writer.drain()
                        await asyncio.sleep(0.2)  # the server runs and commits it
                    break
                writer.write(data)
                await writer.drain()
        cut.set()

    async def _down(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if cut in self._muted:
                    continue
                writer.write(data)
                await writer.drain()
        cut.set()
