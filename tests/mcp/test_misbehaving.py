"""Servers that answer in ways the SDK's server side never does (``_raw_server.py``): each
answer gets the outcome it means, and every error names the server and says why."""

from __future__ import annotations

import logging
import pathlib
import sys

import pytest

import tether
from tether import OutcomeUnknownError, ToolDefinitionError, ToolError
from tether.mcp import MCPServer, MCPServerUnavailableError

RAW = pathlib.Path(__file__).with_name("_raw_server.py")
pytestmark = pytest.mark.timeout(60)


def raw(mode: str, where: pathlib.Path) -> MCPServer:
    return MCPServer(
        "raw", command=[sys.executable, str(RAW)], env={"MCP_RAW": mode}, cwd=str(where)
    )


def calls(where: pathlib.Path) -> list[str]:
    return (where / "calls").read_text().splitlines()


async def test_a_server_error_with_code_32000_is_its_answer_not_a_lost_session(
    tmp_path: pathlib.Path,
) -> None:
    """-32000 is also the code the SDK gives a request whose connection closed; from the
    server it is the server's error: the session stays, and the call is not in doubt."""
    async with raw("rpc_error", tmp_path) as server:
        await server.register(tether.ToolRegistry())
        for _ in range(2):
            with pytest.raises(ToolError) as caught:
                await server.call("write", {"x": "a"})
            assert not isinstance(caught.value, OutcomeUnknownError)
            assert "MCP server 'raw' answered with an error: db down (code -32000)" in str(
                caught.value
            )
    pids = {line.split()[0] for line in calls(tmp_path)}
    assert len(calls(tmp_path)) == 2
    assert len(pids) == 1  # one session, never torn down


async def test_an_answer_that_cannot_be_read_leaves_the_outcome_unknown(
    tmp_path: pathlib.Path,
) -> None:
    """The server ran the tool and answered with a result that is not one: whether the call
    had its effect is unknown (the tool's policy decides), not an error the model retries."""
    async with raw("malformed", tmp_path) as server:
        await server.register(tether.ToolRegistry())
        with pytest.raises(OutcomeUnknownError) as caught:
            await server.call("write", {"x": "a"})
    message = str(caught.value)
    assert "MCP server 'raw' answered, but its answer could not be read" in message
    assert "may have been carried out" in message
    assert len(calls(tmp_path)) == 1


async def test_a_server_that_stops_at_start_says_why_in_the_error(
    tmp_path: pathlib.Path,
) -> None:
    with pytest.raises(MCPServerUnavailableError) as caught:
        async with raw("dies", tmp_path) as server:
            await server.register(tether.ToolRegistry())
    message = str(caught.value)
    assert message.startswith("MCP server 'raw': cannot open a session")
    assert "its last words on standard error: usage: raw_server --db URL" in message


async def test_two_tools_that_become_one_name_are_named_with_their_server(
    tmp_path: pathlib.Path,
) -> None:
    async with raw("collide", tmp_path) as server:
        with pytest.raises(ToolDefinitionError) as caught:
            await server.register(tether.ToolRegistry())
    message = str(caught.value)
    assert "MCP server 'raw': its tool 'bad_name_' (its tool 'bad name!' has that name too)" in (
        message
    )
    assert "give the server a prefix=" in message


async def test_a_tool_whose_contract_changed_is_logged_once_a_session(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The contract a tool was registered with is gone (seen when a session reopens): its
    calls get an error result, and the log tells the operator once, not at every call."""
    tools = tether.ToolRegistry()
    async with raw("", tmp_path) as server:
        (spec,) = await server.register(tools)
        server._contracts["write"] = "an older contract"  # as if registered before a redeploy
        caplog.set_level(logging.WARNING, "tether.mcp")
        for _ in range(3):
            result = await spec.fn(
                {"x": "a"}, tether.ToolContext(run_id="r", call_id="c", attempt=1)
            )
            assert result.error
            assert "changed its contract since 'write' was registered" in str(result.blocks)
    warned = [r for r in caplog.records if "changed its contract" in r.getMessage()]
    assert len(warned) == 1
    assert "until this process is restarted" in warned[0].getMessage()
    assert not (tmp_path / "calls").exists()  # nothing was sent
