"""``postgres._startup``: which start-up errors are waited out, and how (on a virtual clock).

The real thing (a server stopped, or held in recovery, while a worker starts) is in
``test_worker_startup.py``; here the rule and the backoff are checked without waiting.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

import tether
from tether.postgres._startup import START_BACKOFF, connect, waiting_reason

exceptions = asyncpg.exceptions

CURED = [
    ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)"),
    socket.gaierror(-3, "Temporary failure in name resolution"),
    TimeoutError(),
    FileNotFoundError(2, "No such file or directory"),  # a server's socket not there yet
    exceptions.CannotConnectNowError("the database system is in recovery mode"),
    exceptions.CannotConnectNowError("the database system is starting up"),
    exceptions.TooManyConnectionsError("sorry, too many clients already"),
    exceptions.AdminShutdownError("terminating connection due to administrator command"),
    exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    exceptions.ReadOnlySQLTransactionError("cannot execute CREATE SCHEMA in a read-only txn"),
]
MISTAKES = [
    exceptions.InvalidPasswordError('password authentication failed for user "app"'),
    exceptions.InvalidAuthorizationSpecificationError('role "nobody" does not exist'),
    exceptions.InvalidCatalogNameError('database "nope" does not exist'),
    exceptions.InsufficientPrivilegeError("permission denied for database tether"),
    exceptions.ClientConfigurationError("invalid sslmode"),
    exceptions.ProtocolViolationError("unsupported frontend protocol"),
    tether.StoreSchemaError("schema 'tether' is at version 9; upgrade tether"),
    PermissionError(13, "Permission denied"),
    ValueError("invalid port"),
]


@pytest.mark.parametrize("exc", CURED, ids=lambda e: type(e).__name__)
def test_what_waiting_cures_is_named_in_one_line(exc: BaseException) -> None:
    reason = waiting_reason(exc)
    assert reason is not None
    assert "\n" not in reason
    assert type(exc).__name__ in reason


@pytest.mark.parametrize("exc", MISTAKES, ids=lambda e: type(e).__name__)
def test_mistakes_are_not_waited_for(exc: BaseException) -> None:
    assert waiting_reason(exc) is None


class Clock:
    """A virtual clock: ``sleep`` moves it on, and keeps what it was asked to wait."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def failing(times: int, exc: BaseException) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    """An attempt that raises ``exc`` ``times`` times, then returns ``"pool"``."""
    tries: list[int] = []

    async def attempt() -> str:
        tries.append(len(tries))
        if len(tries) <= times:
            raise exc
        return "pool"

    return tries, attempt


async def test_an_outage_is_waited_out_with_backoff_and_a_line_per_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    tries, attempt = failing(4, exceptions.CannotConnectNowError("the database is starting up"))
    with caplog.at_level(logging.WARNING, logger="tether.postgres"):
        result = await connect(
            attempt,
            where="postgresql://db/app (schema tether)",
            wait=60,
            sleep=clock.sleep,
            clock=clock,
            jitter=lambda: 0.5,  # the middle of the jitter: no jitter at all
        )
    assert result == "pool"
    assert len(tries) == 5
    assert clock.waits == [0.25, 0.5, 1.0, 2.0]  # START_BACKOFF, doubling
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4
    assert lines[0] == (
        "waiting for postgresql://db/app (schema tether): the database is starting up "
        "(CannotConnectNowError); trying again in 0.2 s (giving up 60 s from now)"
    )
    assert lines[-1].endswith("trying again in 2.0 s (giving up 58 s from now)")


async def test_the_wait_is_bounded_and_ends_with_the_last_reason() -> None:
    clock = Clock()
    refused = ConnectionRefusedError(111, "Connect call failed ('10.0.0.5', 5432)")
    _tries, attempt = failing(10_000, refused)
    with pytest.raises(tether.StoreUnavailableError) as info:
        await connect(
            attempt,
            where="postgresql://10.0.0.5/app (schema tether)",
            wait=30,
            sleep=clock.sleep,
            clock=clock,
            jitter=lambda: 0.99,
        )
    error = info.value
    assert error.__cause__ is refused
    assert error.waited == pytest.approx(30)
    assert str(error) == (
        "postgresql://10.0.0.5/app (schema tether): still unreachable after waiting 30 s: "
        "ConnectionRefusedError: [Errno 111] Connect call failed ('10.0.0.5', 5432)"
    )
    assert max(clock.waits) <= START_BACKOFF.cap * 1.5
    assert sum(clock.waits) == pytest.approx(30)  # the last wait is cut to what was left


@pytest.mark.parametrize("wait", [0.0, 60.0])
async def test_a_mistake_is_raised_at_once_and_no_wait_tries_once(wait: float) -> None:
    clock = Clock()
    wrong = exceptions.InvalidPasswordError('password authentication failed for user "app"')
    tries, attempt = failing(1, wrong)
    with pytest.raises(exceptions.InvalidPasswordError):
        await connect(attempt, where="db", wait=wait, sleep=clock.sleep, clock=clock)
    assert (len(tries), clock.waits) == (1, [])
    tries, attempt = failing(1, ConnectionRefusedError(111, "refused"))
    if wait:
        assert await connect(attempt, where="db", wait=wait, sleep=clock.sleep, clock=clock)
    else:  # tries once, and raises what it met as it was
        with pytest.raises(ConnectionRefusedError):
            await connect(attempt, where="db", wait=wait, sleep=clock.sleep, clock=clock)
    assert len(tries) == (2 if wait else 1)
