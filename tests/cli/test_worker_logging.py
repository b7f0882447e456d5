"""A worker's log during a database outage: asyncpg's reconnect tries are one line each."""

from __future__ import annotations

import logging
import sys

from tether.cli._worker import _one_line


def test_a_reconnect_try_logs_one_line_with_the_error() -> None:
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
    except ConnectionRefusedError:
        record = logging.LogRecord(
            "asyncpg.pool",
            logging.WARNING,
            __file__,
            1,
            "Failed to restore the pool connection floor; retrying",
            (),
            sys.exc_info(),
        )
    assert _one_line(record)
    text = logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert text == (
        "WARNING asyncpg.pool: Failed to restore the pool connection floor; retrying "
        "(ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 5432))"
    )
