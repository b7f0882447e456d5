"""A stdio server's standard error, line by line, into the ``tether.mcp`` logger.

A server started over stdio writes what it has to say on its standard error: FastMCP logs an
INFO line for every request it serves, a library warns, a crash prints its traceback. Let
through as is, that is mixed into the worker's own log, unformatted and at no level, and a
busy server drowns it. So the server's standard error is a pipe, read here: each line is
logged under ``tether.mcp`` as ``MCP server NAME: LINE``, at DEBUG, or at WARNING when it
belongs to an error (an ``ERROR`` or ``CRITICAL`` record, a traceback: see ``Levels``).
``MCPServer(errlog=...)`` sends it to a file of your choosing instead.
"""

from __future__ import annotations

import logging
import os
import re
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio

log = logging.getLogger("tether.mcp")

MAX_LINE = 16 * 1024
"""Bytes of one line kept; a longer line is logged in pieces of this size."""
DRAIN_TIMEOUT = 1.0
"""Seconds the last lines of a server that ended are waited for (a child it started may keep
the pipe open: it is not waited for longer)."""

_RECORD = re.compile(r"\s*(\[[^\]]*\]\s*)?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_ERROR = re.compile(r"\b(ERROR|CRITICAL|FATAL|Traceback)\b|\b\w*(Error|Exception):", re.ASCII)
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Levels:
    """The level of each line of one server's standard error, in order.

    A line that starts a log record (``INFO ...``, ``[12/01/26 10:00:00] ERROR ...``, as
    FastMCP's and ``logging``'s handlers write them) is WARNING for an error or a critical
    record, else DEBUG; a line that looks like an error of its own (``Traceback``,
    ``SomeError: ...``) is WARNING; an indented line continues the record or traceback before
    it (a wrapped message, the frames of a traceback) at its level; anything else is DEBUG.
    """

    def __init__(self) -> None:
        self._current = logging.DEBUG

    def of(self, line: str) -> int:
        record = _RECORD.match(line)
        if record is not None:
            loud = record.group(2) in ("ERROR", "CRITICAL", "FATAL")
            self._current = logging.WARNING if loud else logging.DEBUG
        elif _ERROR.search(line):
            self._current = logging.WARNING
        elif not line[:1].isspace():
            self._current = logging.DEBUG
        return self._current


@asynccontextmanager
async def server_stderr(server: str, last: deque[str] | None = None) -> AsyncIterator[TextIO]:
    """A file to give a stdio server as its standard error; its lines are logged (see the
    module) until the block ends, and those the server wrote last, up to ``DRAIN_TIMEOUT``
    after. Each line is also appended to ``last``, when given (a ``deque`` with a length).

    On cancellation: stops reading at once; what was not read yet is lost.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    errlog = os.fdopen(write_fd, "w")
    try:
        async with anyio.create_task_group() as tg:
            ended = anyio.Event()
            tg.start_soon(_relay, read_fd, server, ended, last)
            try:
                yield errlog
            finally:
                errlog.close()  # ours: the relay reads to the end once the server's is closed
                with anyio.move_on_after(DRAIN_TIMEOUT, shield=True):
                    await ended.wait()
                tg.cancel_scope.cancel()
    finally:
        errlog.close()
        os.close(read_fd)


async def _relay(fd: int, server: str, ended: anyio.Event, last: deque[str] | None) -> None:
    pending = b""
    levels = Levels()

    def emit(raw: bytes) -> None:
        line = _ESCAPES.sub("", raw.decode("utf-8", "replace")).rstrip()
        if line:
            level = levels.of(line)
            log.log(level, "MCP server %s: %s", server, line, extra={"mcp_server": server})
            if last is not None:
                last.append(line)

    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                emit(raw)
            while len(pending) > MAX_LINE:
                emit(pending[:MAX_LINE])
                pending = pending[MAX_LINE:]
    finally:
        if pending:
            emit(pending)
        ended.set()
