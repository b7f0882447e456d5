"""The two PostgreSQL drivers the store could use, behind one small interface.

``Asyncpg`` is ``asyncpg.create_pool`` as shipped (its release runs a reset query: one more
round trip per checkout) or with a no-op ``reset``; ``Psycopg`` a
``psycopg_pool.AsyncConnectionPool`` (sends nothing on release). Both run the store's fenced
append (one statement: advance the run's ``next_seq`` if the lease holds, insert the events)
and its read of one run, on a pool of ``POOL_SIZE`` autocommit connections.
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

import asyncpg
import psycopg
import psycopg_pool

POOL_SIZE = 16
PAYLOAD = b"x" * 1024
READ_EVENTS = 1000
OWNER, EPOCH = "bench", 1

SCHEMA = (
    "CREATE TABLE runs (run_id text PRIMARY KEY, status text NOT NULL DEFAULT 'active', "
    "next_seq bigint NOT NULL DEFAULT 0, owner text, epoch bigint NOT NULL DEFAULT 0, "
    "expires_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE events (run_id text NOT NULL REFERENCES runs ON DELETE CASCADE, "
    "seq bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (run_id, seq))",
)
CREATE_RUN = "INSERT INTO runs (run_id, owner, epoch) VALUES ($1, $2, $3)"
APPEND = """
WITH lease AS (
  UPDATE runs SET next_seq = $4 + cardinality($5::bytea[]), updated_at = now()
  WHERE run_id = $1 AND epoch = $2 AND owner = $3 AND next_seq = $4
  RETURNING run_id)
INSERT INTO events (run_id, seq, payload)
SELECT lease.run_id, $4 + t.ord - 1, t.p
FROM lease, unnest($5::bytea[]) WITH ORDINALITY AS t(p, ord)
"""
READ = "SELECT seq, payload FROM events WHERE run_id = $1 ORDER BY seq"


def to_psycopg(sql: str) -> str:
    """``$n`` placeholders as psycopg's named ``%(pn)s`` (a repeated ``$4`` is one parameter)."""
    return re.sub(r"\$(\d+)", r"%(p\1)s", sql)


def named(*args: object) -> dict[str, object]:
    return {f"p{i}": a for i, a in enumerate(args, start=1)}


def _check_appended(run_id: str, inserted: int, expected: int) -> None:
    if inserted != expected:
        raise RuntimeError(f"fenced append to {run_id} inserted {inserted} of {expected} rows")


async def _no_reset(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    return None


class Asyncpg:
    def __init__(self, name: str, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        self.name, self.pool = name, pool

    @classmethod
    async def open(cls, dsn: str, schema: str, sync: str, *, reset: bool) -> Asyncpg:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=POOL_SIZE,
            max_size=POOL_SIZE,
            server_settings={"search_path": schema, "synchronous_commit": sync},
            reset=None if reset else _no_reset,
        )
        return cls("asyncpg" if reset else "asyncpg-noreset", pool)

    async def execute(self, sql: str, *args: object) -> None:
        await self.pool.execute(sql, *args)

    async def append(self, run_id: str, seq: int, payloads: list[bytes]) -> None:
        status: str = await self.pool.execute(APPEND, run_id, EPOCH, OWNER, seq, payloads)
        _check_appended(run_id, int(status.rsplit(" ", 1)[1]), len(payloads))

    async def read(self, run_id: str) -> int:
        return len(await self.pool.fetch(READ, run_id))

    async def close(self) -> None:
        await self.pool.close()


PgPool: TypeAlias = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]


class Psycopg:
    name = "psycopg"

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, dsn: str, schema: str, sync: str) -> Psycopg:
        options = f"-c search_path={schema} -c synchronous_commit={sync}"
        kwargs = {"autocommit": True, "options": options}
        pool: PgPool = psycopg_pool.AsyncConnectionPool(
            dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, kwargs=kwargs, open=False
        )
        await pool.open(wait=True)
        return cls(pool)

    async def execute(self, sql: str, *args: object) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(to_psycopg(sql).encode(), named(*args) if args else None)

    async def append(self, run_id: str, seq: int, payloads: list[bytes]) -> None:
        params = named(run_id, EPOCH, OWNER, seq, payloads)
        async with self.pool.connection() as conn:
            cur = await conn.execute(PG_APPEND, params)
            _check_appended(run_id, cur.rowcount, len(payloads))

    async def read(self, run_id: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(PG_READ, named(run_id), binary=True)
            return len(await cur.fetchall())

    async def close(self) -> None:
        await self.pool.close()


PG_APPEND, PG_READ = to_psycopg(APPEND).encode(), to_psycopg(READ).encode()
Driver = Asyncpg | Psycopg


def server_version(dsn: str) -> str | None:
    """The server's version, as psycopg reads it on connecting."""
    with psycopg.connect(dsn) as conn:
        version: str | None = conn.info.parameter_status("server_version")
    return version


def versions() -> dict[str, Any]:
    """The drivers' versions, for the report's machine block."""
    return {
        "drivers": {"asyncpg": asyncpg.__version__, "psycopg": psycopg.__version__},
        "psycopg_pool": psycopg_pool.__version__,
    }
