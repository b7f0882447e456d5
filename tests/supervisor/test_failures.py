"""Which failures are the store's (waited out, counted against nothing) and which are not."""

from __future__ import annotations

import errno

import pytest

from tether import BlobError, JournalBrokenError
from tether._errors import JournalIOError
from tether.supervisor._failures import explain, is_store_failure, unusable


def _caused(exc: Exception, code: int) -> Exception:
    exc.__cause__ = OSError(code, "Too many open files")
    return exc


@pytest.mark.parametrize(
    ("exc", "store", "bad_file"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True, False),
        (OSError(errno.EIO, "Input/output error"), True, False),
        (OSError(errno.EMFILE, "Too many open files"), True, False),
        (JournalIOError("r.journal", "read", OSError(errno.ENOSPC, "full")), True, False),
        (JournalBrokenError("r.journal", OSError(errno.EIO, "I/O")), True, False),
        (TimeoutError(), True, False),
        (_caused(BlobError("ab" * 32, "cannot be read"), errno.EMFILE), True, False),
        (BlobError("ab" * 32, "content does not match its digest"), False, False),
        (OSError(errno.EACCES, "Permission denied"), False, True),
        (JournalIOError("r.journal", "open", OSError(errno.EISDIR, "Is a directory")), False, True),
        (ValueError("a bug in a tool adapter"), False, False),
        (
            ExceptionGroup("calls", [OSError(errno.EIO, "x"), OSError(errno.ENOSPC, "y")]),
            True,
            False,
        ),
        (ExceptionGroup("calls", [OSError(errno.EIO, "x"), ValueError("bug")]), False, False),
    ],
)
def test_failures_are_classified(exc: BaseException, store: bool, bad_file: bool) -> None:
    assert is_store_failure(exc) is store
    assert unusable(exc) is bad_file


def test_explain_names_each_cause_not_the_group() -> None:
    group = ExceptionGroup(
        "unhandled errors in a TaskGroup",
        [JournalBrokenError("r.journal", OSError(errno.ENOSPC, "No space left on device"))],
    )
    text = explain(group)
    assert "sub-exception" not in text
    assert "No space left on device" in text
