"""``tether ARGV`` as a process of its own, slow or watched where a race test needs it.

``python -m tests.operate._slow_answer MODE MARK ARGV...``:

``slow-append``
    The answer's append is slow, as on a loaded machine or a slow disk or database: once the
    answer is checked and the run's journal held, its write (a directory store's
    ``FileJournal.append``, a Postgres store's append statement) waits until a file
    ``MARK.go`` exists, ``MARK`` written first so that the test knows the window is open.
``mark-queue``
    ``MARK`` is written when the answer, the journal found held, goes to the run's inbox
    (``post_checked``), then the answer goes on as it would; ``MARK.waiting`` once that post
    finds the inbox's lock taken by another (a refused ``flock``, or
    ``pg_try_advisory_xact_lock`` giving false), so that a test knows the post waits for it.

What the process prints and its exit code are the command's own.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

GIVE_UP = 60.0
"""Seconds a slow append waits for its ``.go`` (a test that never writes it must still end)."""


def _mark(mark: pathlib.Path) -> None:
    mark.write_text("here")


async def _until_go(mark: pathlib.Path) -> None:
    _mark(mark)
    go, deadline = mark.with_suffix(".go"), time.monotonic() + GIVE_UP
    while not go.exists() and time.monotonic() < deadline:
        await anyio.sleep(0.01)


def _slowed(
    method: Callable[..., Awaitable[Any]], mark: pathlib.Path, slow: Callable[..., bool]
) -> Any:
    """``method``, waiting for ``mark``'s ``.go`` the first time ``slow(*args)`` holds."""
    first = [True]

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if first[0] and slow(*args):
            first[0] = False
            await _until_go(mark)
        return await method(*args, **kwargs)

    return wrapper


def _marked(method: Callable[..., Awaitable[Any]], mark: pathlib.Path) -> Any:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        _mark(mark)
        return await method(*args, **kwargs)

    return wrapper


def _waiting_marked(method: Callable[..., Any], mark: pathlib.Path, posting: list[bool]) -> Any:
    """``FileOps.lock``, writing ``MARK.waiting`` when it is refused while a post goes on."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        taken = method(*args, **kwargs)
        if not taken and posting[0]:
            mark.with_suffix(".waiting").write_text("waiting")
        return taken

    return wrapper


def _refusal_marked(method: Callable[..., Awaitable[Any]], mark: pathlib.Path) -> Any:
    """``asyncpg.Connection.fetchval``, writing ``MARK.waiting`` when the inbox's advisory
    lock is refused."""

    @functools.wraps(method)
    async def wrapper(conn: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        value = await method(conn, query, *args, **kwargs)
        if "pg_try_advisory_xact_lock" in query and value is False:
            mark.with_suffix(".waiting").write_text("waiting")
        return value

    return wrapper


def main(mode: str, mark: pathlib.Path, argv: list[str]) -> int:
    from tether.cli import main as tether
    from tether.journal import FileStore
    from tether.journal._writer import FileJournal

    if mode == "slow-append":
        FileJournal.append = _slowed(FileJournal.append, mark, lambda *_: True)  # type: ignore[method-assign]
        if "--store" in argv:
            import asyncpg

            def appending(_conn: Any, query: str, *_: Any) -> bool:
                return query.startswith("WITH lease AS (UPDATE")  # ``Sql.append``

            asyncpg.Connection.execute = _slowed(  # type: ignore[method-assign]
                asyncpg.Connection.execute, mark, appending
            )
    elif mode == "mark-queue":
        from tether.journal._file import FileOps

        posting = [False]
        marked = _marked(FileStore.post_checked, mark)

        async def post_checked(*args: Any, **kwargs: Any) -> Any:
            posting[0] = True  # (the journal's own lock, refused before, is not the inbox's)
            return await marked(*args, **kwargs)

        FileStore.post_checked = post_checked  # type: ignore[method-assign]
        FileOps.lock = _waiting_marked(FileOps.lock, mark, posting)  # type: ignore[method-assign]
        if "--store" in argv:
            import asyncpg

            from tether.postgres import PostgresStore

            PostgresStore.post_checked = _marked(PostgresStore.post_checked, mark)  # type: ignore[method-assign]
            asyncpg.Connection.fetchval = _refusal_marked(asyncpg.Connection.fetchval, mark)  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return tether(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]))
