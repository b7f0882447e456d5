"""A real PostgreSQL server for the session, and a fresh schema (a private store) per test.

Without server binaries the tests are skipped with the reason; with ``TETHER_REQUIRE_POSTGRES=1``
(as CI sets) that is a failure instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tether.testing._pgserver import PostgresServer, postgres_unavailable


def require_postgres() -> None:
    """Skip the test when no server can be started here (fail it where CI requires one)."""
    reason = postgres_unavailable()
    if reason is not None:
        if os.environ.get("TETHER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL tests are required here, but {reason}")
        pytest.skip(f"no PostgreSQL server to test against: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    require_postgres()
    with PostgresServer() as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> str:
    return pg_server.dsn


@pytest.fixture
def pg_schema() -> str:
    """A schema of its own for each test: stores in one test share it, tests never do."""
    return f"t_{uuid.uuid4().hex[:16]}"
