"""What the store asks of each connection, and which errors mean a connection went.

A statement that fails with one of ``connection_errors`` has an unknown outcome: the store
retries an idempotent one (``PostgresStore._retry``) and settles a write by reading what
landed (``_append``) before it sends it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import asyncpg

SESSION_SETTINGS = {"default_transaction_isolation": "read committed"}
"""The fencing relies on READ COMMITTED's re-check of an updated row, whatever the database's
default isolation is."""


def connection_errors() -> tuple[type[BaseException], ...]:
    """Errors after which a statement's outcome is unknown (the connection or server went)."""
    import asyncpg

    return (
        OSError,
        TimeoutError,  # asyncio's too (the same class)
        asyncpg.InterfaceError,
        asyncpg.PostgresConnectionError,
        asyncpg.exceptions.OperatorInterventionError,  # admin/crash shutdown, query cancelled
        asyncpg.exceptions.CannotConnectNowError,
        # "cannot switch to state 12": the connection's protocol state went wrong under a
        # statement (one cut off mid-flight), so its outcome is as unknown as after a drop.
        asyncpg.exceptions.InternalClientError,
    )


def unique_violation() -> type[BaseException]:
    import asyncpg

    return asyncpg.exceptions.UniqueViolationError


async def keep_session(conn: asyncpg.Connection[Any]) -> None:
    """Pool connections change no session state (no LISTEN, SET or session locks), so the
    default reset query, one more round trip per checkout, is skipped; asyncpg still rolls back
    a transaction left open."""


def display(dsn: str) -> str:
    """The DSN without its user and password, for messages (any host list is kept as is)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "postgresql"
    if not parts.scheme:
        return "postgresql"
    hosts = parts.netloc.rpartition("@")[2] or "localhost"
    return f"{parts.scheme}://{hosts}{parts.path}"
