"""Errors name their root cause and cross process boundaries (pickling) intact."""

from __future__ import annotations

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
)


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
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)
