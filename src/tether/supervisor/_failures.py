"""What a run's task crashed on: the store under it, or the run itself; said in words.

The supervisor treats the two apart (docs/design.md invariant 9). A store that fails (a full
disk, an I/O error, a broken journal handle, a lost database connection) is not the run's
doing: the run waits and is tried again with backoff, for as long as it takes, and nothing is
counted against it. Anything else that escapes a drive is the run's own crash, counted towards
its crash-loop limit.
"""

from __future__ import annotations

import errno

from .._errors import JournalBrokenError, JournalClosedError, JournalIOError
from ..journal._descriptors import out_of_descriptors

UNUSABLE: frozenset[int] = frozenset(
    {errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EINVAL, errno.ELOOP}
)
"""OS errors that waiting does not cure: the file is not one the store can use (no permission,
not a regular file). A run whose journal fails so waits for a person, not for the store."""


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``: itself, or every leaf of an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(leaves(inner))
        return found
    return [exc]


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (every leaf of it, for a group) is a failure of the store that waiting
    may cure (a full disk, an I/O error, a broken handle, a lost connection), not the run's."""
    return all(_store_leaf(leaf) for leaf in leaves(exc))


def unusable(exc: BaseException) -> bool:
    """Whether ``exc`` says a run's file cannot be used at all (``UNUSABLE``)."""
    return any(_errno(leaf) in UNUSABLE for leaf in leaves(exc))


def _errno(exc: BaseException) -> int | None:
    if isinstance(exc, JournalIOError):
        return exc.errno
    if isinstance(exc, OSError):
        return exc.errno
    return None


def _store_leaf(exc: BaseException) -> bool:
    if _errno(exc) in UNUSABLE:
        return False
    if out_of_descriptors(exc):  # however wrapped (a blob that could not be read, say)
        return True
    if isinstance(exc, (JournalBrokenError, JournalClosedError, JournalIOError, OSError)):
        return True
    if isinstance(exc, TimeoutError):
        return True
    if type(exc).__module__.partition(".")[0] == "asyncpg":
        from ..postgres._connection import connection_errors

        return isinstance(exc, connection_errors())
    return False


def explain(exc: BaseException) -> str:
    """``exc`` in one line that names the root cause: each leaf of a group (not "2
    sub-exceptions"), and the OS error behind a broken journal handle."""
    parts: list[str] = []
    for leaf in leaves(exc):
        text = f"{type(leaf).__name__}: {leaf}"
        cause = leaf.__cause__
        if cause is not None and str(cause) not in text:
            text += f" (caused by {type(cause).__name__}: {cause})"
        if text not in parts:
            parts.append(text)
    return "; ".join(parts)
