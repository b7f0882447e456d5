"""A stdio server's standard error goes to the ``tether.mcp`` logger, not the host's stderr.

The test server logs as a FastMCP server does (``configure_logging``: rich's handler, an INFO
line per request, wrapped to 80 columns in a pipe), and its ``fail`` tool logs an error with
its traceback. Those lines used to land on the worker's own standard error, mixed into its
log; now each is a record of ``tether.mcp``: DEBUG, or WARNING for the error and its
traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import tether
from tether.mcp._stderr import Levels

from ._helpers import stdio_server


async def _call_lookup_and_fail(world: Path, **options: object) -> None:
    (world / "log-like-fastmcp").parent.mkdir(parents=True, exist_ok=True)
    (world / "log-like-fastmcp").touch()
    server = stdio_server(world, trusted=True, **options)
    async with server:
        await server.register(tether.ToolRegistry())
        assert not (await server.call("lookup", {"ticket": "K-1"}, key="k1")).isError
        assert (await server.call("fail", {}, key="k2")).isError


async def test_a_servers_log_lines_become_tether_mcp_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.DEBUG, logger="tether.mcp"):
        await _call_lookup_and_fail(tmp_path / "world")
    assert "Processing request" not in capfd.readouterr().err  # nothing on the host's stderr
    lines = [
        (r.levelno, r.getMessage().removeprefix("MCP server helpdesk: "))
        for r in caplog.records
        if getattr(r, "mcp_server", None) == "helpdesk"  # a line of the server's stderr
    ]
    requests = [(level, text) for level, text in lines if "Processing request" in text]
    assert len(requests) == 3  # tools/list, then two tools/call
    assert {level for level, _ in requests} == {logging.DEBUG}
    loud = [text for level, text in lines if level == logging.WARNING]
    assert any("ERROR" in text and "fail: the queue is locked" in text for text in loud), loud
    assert any("Traceback" in text for text in loud), loud
    assert any("RuntimeError: the queue is locked" in text for text in loud), loud
    quiet = [text for level, text in lines if level == logging.DEBUG]
    assert not [text for text in quiet if "Traceback" in text or "RuntimeError" in text]


async def test_errlog_sends_the_servers_stderr_to_a_file_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "server.err"
    with path.open("w") as errlog, caplog.at_level(logging.DEBUG, logger="tether.mcp"):
        await _call_lookup_and_fail(tmp_path / "world", errlog=errlog)
    text = path.read_text()
    assert text.count("Processing request of type") == 3
    assert "RuntimeError: the queue is locked" in text
    assert not [r for r in caplog.records if hasattr(r, "mcp_server")]


RICH = """\
[12/01/26 21:35:32] INFO     Processing request of type            server.py:733
                             ListToolsRequest
                    ERROR    fail: the queue is locked            _server.py:170
                             ╭─ Traceback (most recent call las─╮
                             │ ❱ 168 │   │   │   │   raise Runt │
                             ╰──────────────────────────────────╯
                             RuntimeError: the queue is locked
                    INFO     Processing request of type            server.py:733
                             CallToolRequest"""
PLAIN = """\
Starting the help desk
Traceback (most recent call last):
  File "server.py", line 3, in <module>
    main()
ValueError: no database
2026-12-01 10:00:00,000 WARNING db: slow query
WARNING:root:deprecated option
some line"""


@pytest.mark.parametrize(
    ("text", "loud"),
    [
        (RICH, [False, False, True, True, True, True, True, False, False]),
        (PLAIN, [False, True, True, True, True, False, False, False]),
    ],
    ids=["rich", "plain"],
)
def test_which_lines_are_loud(text: str, loud: list[bool]) -> None:
    levels = Levels()
    assert [levels.of(line) == logging.WARNING for line in text.splitlines()] == loud
