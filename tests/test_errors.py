"""Errors name their root cause and cross process boundaries (pickling) intact."""

from __future__ import annotations

import copy
import errno
import pickle

import pytest

from tether import (
    JournalBrokenError,
    JournalCorruptError,
    JournalIOError,
    JournalRemovedError,
    StoreUnavailableError,
    TetherError,
    ToolContext,
    ToolUnavailableError,
)
from tether.mcp import MCPServerUnavailableError


def test_a_broken_handle_names_the_os_error_behind_it() -> None:
    cause = OSError(errno.ENOSPC, "No space left on device", "/data/runs/r.journal")
    error = JournalBrokenError("/data/runs/r.journal", cause)
    assert str(error) == (
        "/data/runs/r.journal: journal handle is broken: [Errno 28] No space left on device; "
        "reopen the journal to recover"
    )
    assert error.reason == "[Errno 28] No space left on device"


def test_a_broken_handle_without_an_os_error_names_the_exception() -> None:
    error = JournalBrokenError("p", RuntimeError("ring gone"))
    assert error.reason == "RuntimeError: ring gone"
    assert "journal handle is broken: a write or fsync failed" in str(JournalBrokenError("p"))


def test_an_io_error_names_what_was_being_done_and_the_os_error() -> None:
    error = JournalIOError("/d/runs/r.journal", "create the run", OSError(errno.ENOSPC, "x"))
    assert str(error) == "/d/runs/r.journal: cannot create the run: [Errno 28] x"
    assert (error.errno, error.strerror, error.action) == (errno.ENOSPC, "x", "create the run")


@pytest.mark.parametrize(
    "error",
    [
        JournalBrokenError("p", OSError(errno.EIO, "Input/output error")),
        JournalBrokenError("p"),
        JournalRemovedError("p"),
        JournalIOError("p", "read", OSError(errno.EACCES, "Permission denied")),
        JournalCorruptError("p", 300, 4, "checksum mismatch"),
        StoreUnavailableError("postgresql://db/app (schema t)", 60.2, "refused"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling_with_their_message_and_fields(error: TetherError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert vars(again) == vars(error)


CTX = ToolContext(run_id="run-1", call_id="toolu_1", attempt=2)


def _bound_mcp_error() -> MCPServerUnavailableError:
    error = MCPServerUnavailableError("helpdesk", "cannot open a session")
    error.attempt = CTX  # (as the adapter binds it)
    return error


@pytest.mark.parametrize(
    "error",
    [ToolUnavailableError("search", "connection refused", attempt=CTX), _bound_mcp_error()],
    ids=lambda e: type(e).__name__,
)
def test_an_unavailable_tool_error_keeps_its_attempt_through_pickle_and_copy(
    error: ToolUnavailableError,
) -> None:
    """The attempt it is bound to is its proof that nothing was sent: a copy keeps it."""
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(again) is type(error)
        assert str(again) == str(error)
        assert again.attempt == CTX


@pytest.mark.parametrize("attempt", [2, "run-1:toolu_1:2", {"attempt": 2}])
def test_an_unavailable_tool_error_takes_only_a_tool_context_as_its_attempt(
    attempt: object,
) -> None:
    """``attempt=ctx.attempt`` (an int) would leave it silently unbound, the outage handed to
    the model: refused at once."""
    with pytest.raises(TypeError, match="takes the attempt's ToolContext"):
        ToolUnavailableError("search", "refused", attempt=attempt)  # type: ignore[arg-type]
    assert ToolUnavailableError("search", "refused", attempt=None).attempt is None
