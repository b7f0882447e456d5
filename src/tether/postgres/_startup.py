"""Reaching the database when a store opens: waiting out an outage, failing on a mistake.

A fleet restarted together with its database starts while the server is still down, in crash
recovery, starting up or out of connection slots, or while its host name does not resolve
yet. Those pass: ``connect`` tries again with backoff (``START_BACKOFF``), logging what it
waits for each time, until the store's ``start_wait`` runs out, then raises
``StoreUnavailableError`` with the last reason. Mistakes do not pass, so they fail at once: a
wrong password, a role or database that does not exist, a schema newer than this tether, a
malformed setting (``waiting_reason`` returns ``None`` for them).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from .._backoff import Backoff
from .._errors import StoreUnavailableError

log = logging.getLogger("tether.postgres")

START_BACKOFF = Backoff(first=0.25, cap=4.0)
"""Between tries to reach the database at start-up."""

_T = TypeVar("_T")


def waiting_reason(exc: BaseException) -> str | None:
    """Why the database cannot be used *yet*, in one line, when waiting may cure it; ``None``
    when it will not (the error is a mistake to report at once).

    Waiting cures: a refused, reset or timed-out connection, a socket or host name that is not
    there (yet), a server starting up, shutting down or in recovery, too many connections,
    a server out of resources, a read-only server (a standby not yet promoted), a connection
    lost half-way.
    """
    import asyncpg

    exceptions = asyncpg.exceptions
    if isinstance(exc, PermissionError):
        return None  # a socket or certificate this user may not open: waiting changes nothing
    if isinstance(exc, OSError):
        return _one_line(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, exceptions.ProtocolViolationError):
        return None
    transient = (
        exceptions.CannotConnectNowError,  # starting up, shutting down, in recovery
        exceptions.AdminShutdownError,
        exceptions.CrashShutdownError,
        exceptions.InsufficientResourcesError,  # too many connections, disk full, memory
        exceptions.PostgresConnectionError,
        exceptions.ReadOnlySQLTransactionError,  # a standby: it may be promoted
        exceptions.InternalClientError,
    )
    if isinstance(exc, transient) or (
        # the connection closed under the start-up (not a malformed setting: a ValueError)
        isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, ValueError)
    ):
        return _one_line(f"{exc} ({type(exc).__name__})")
    return None


def _one_line(text: str) -> str:
    """The server's message with its ``DETAIL:`` lines, on one log line."""
    return " ".join(text.split())


async def connect(
    attempt: Callable[[], Awaitable[_T]],
    *,
    where: str,
    wait: float,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[], float] = random.random,
) -> _T:
    """Run ``attempt`` (open a pool, check the schema) until it succeeds, waiting with backoff
    while it fails for a reason ``waiting_reason`` names, for up to ``wait`` seconds.

    ``where`` names the database in the log lines and the error.

    Raises:
        StoreUnavailableError: still unreachable after ``wait`` seconds (the last error is its
            ``__cause__``); with ``wait`` 0, the error itself, as it came.
        Anything else ``attempt`` raises, at once.

    On cancellation: stops waiting at once (``attempt`` cleans up after itself).
    """
    began = clock()
    tries = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            why = waiting_reason(exc)
            if why is None or wait <= 0:
                raise
            tries += 1
            waited = clock() - began
            left = wait - waited
            if left <= 0:
                raise StoreUnavailableError(where, waited, why) from exc
            delay = min(START_BACKOFF.delay(tries, jitter), left)
            log.warning(
                "waiting for %s: %s; trying again in %.1f s (giving up %.0f s from now)",
                where,
                why,
                delay,
                left,
            )
        await sleep(delay)
