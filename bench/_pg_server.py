"""The PostgreSQL side of the store bench: a fresh place per case, CPU and WAL statistics.

One throwaway server (the script starts it) with two databases: the default one and
``tether_nosync``, where ``synchronous_commit`` is off. Every case gets a new schema (or a new
directory, for the file store), dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from _pg_results import Sample, Settings, Variant

import tether

NOSYNC_DB = "tether_nosync"
STATS_SETTLE = 0.1  # seconds for closed backends to flush their statistics
SERVER_SETTINGS = {"track_wal_io_timing": "on"}  # times WAL syncs; changes nothing else
PG_SETTINGS = (
    "track_wal_io_timing",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "commit_delay",
    "shared_buffers",
    "max_wal_size",
)


@dataclass(frozen=True)
class Place:
    """A fresh store: a directory, or a schema of a database (``location`` is the DSN)."""

    variant: Variant
    location: str
    schema: str

    def open(self) -> tether.Store:
        if self.variant == "file":
            return tether.FileStore(self.location, redact=None)
        return tether.PostgresStore(self.location, schema=self.schema, redact=None)

    @property
    def child_args(self) -> list[str]:
        return [self.variant, self.location, self.schema]


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: the postmaster, its live children and reaped ones."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int | str) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None

    main = fields(postmaster)
    if main is None:
        return 0.0
    # after ") ": state ppid ... utime (index 11) stime cutime cstime
    total = sum(int(x) for x in main[11:15])
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        f = fields(name)
        if f is not None and f[1] == str(postmaster):
            total += int(f[11]) + int(f[12])
    return total / tick


@dataclass(frozen=True)
class Counters:
    """PostgreSQL's cumulative statistics at one moment (``pg_stat_database``, ``pg_stat_wal``)."""

    xacts: int
    wal_syncs: int
    wal_sync_ms: float
    wal_bytes: int


@dataclass
class Bench:
    """The scratch directory, the server and an admin connection to each of its databases."""

    root: Path
    dsns: dict[Variant, str]
    admins: dict[Variant, asyncpg.Connection[Any]]
    postmaster: int
    settings: Settings
    log: Path
    _seq: int = 0

    def _name(self) -> str:
        self._seq += 1
        return f"b{self._seq:03d}"

    @asynccontextmanager
    async def place(self, variant: Variant) -> AsyncIterator[Place]:
        name = self._name()
        if variant == "file":
            path = self.root / name
            try:
                yield Place(variant, str(path), name)
            finally:
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))
            return
        try:
            yield Place(variant, self.dsns[variant], name)
        finally:
            await self.admins[variant].execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")

    def cpu(self) -> float:
        return server_cpu(self.postmaster)

    async def counters(self, variant: Variant) -> Counters | None:
        """Committed transactions of the variant's database; WAL syncs, their time and bytes."""
        if variant == "file":
            return None
        await anyio.sleep(STATS_SETTLE)
        conn = self.admins[variant]
        db = self.dsns[variant].rsplit("/", 1)[1]
        row = await conn.fetchrow(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1), "
            "wal_sync, wal_sync_time, wal_bytes FROM pg_stat_wal",
            db,
        )
        assert row is not None
        return Counters(int(row[0]), int(row[1]), float(row[2]), int(row[3]))


def add_counters(sample: Sample, before: Counters | None, after: Counters | None) -> None:
    if before is None or after is None:
        return
    sample.xacts = after.xacts - before.xacts
    sample.wal_syncs = after.wal_syncs - before.wal_syncs
    sample.wal_sync_ms = after.wal_sync_ms - before.wal_sync_ms
    sample.wal_bytes = after.wal_bytes - before.wal_bytes


async def server_facts(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        facts: dict[str, Any] = {"version": await conn.fetchval("SHOW server_version")}
        for name in PG_SETTINGS:
            facts[name] = await conn.fetchval(f"SHOW {name}")
        return facts
    finally:
        await conn.close()


@asynccontextmanager
async def open_bench(
    dsn: str, data_dir: Path, root: Path, settings: Settings
) -> AsyncIterator[tuple[Bench, dict[str, Any]]]:
    """The bench over the server at ``dsn`` (its data in ``data_dir``) and the file store's
    ``root``, with the ``tether_nosync`` database created; and the server's settings."""
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"CREATE DATABASE {NOSYNC_DB}")
    await admin.execute(f"ALTER DATABASE {NOSYNC_DB} SET synchronous_commit = off")
    nosync_dsn = dsn.rsplit("/", 1)[0] + f"/{NOSYNC_DB}"
    admin_nosync = await asyncpg.connect(nosync_dsn)
    try:
        if await admin_nosync.fetchval("SHOW synchronous_commit") != "off":
            raise RuntimeError(f"synchronous_commit is not off in {NOSYNC_DB}")
        facts = await server_facts(dsn)
        postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
        yield (
            Bench(
                root=root,
                dsns={"postgres": dsn, "pg-async": nosync_dsn},
                admins={"postgres": admin, "pg-async": admin_nosync},
                postmaster=postmaster,
                settings=settings,
                log=root / "workers.log",
            ),
            facts,
        )
    finally:
        await admin_nosync.close()
        await admin.close()
