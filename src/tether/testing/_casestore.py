"""Where a case's run lives, as the harness sees it between two of the case's processes.

The harness reads the run after each process (to find lost records and what the run waits for)
and records a person's answers, the way a support tool would: under the run's lock, while no
process drives it. A case's run is in a ``FileStore`` in the case's directory, or in a
PostgreSQL schema of its own (``crash_<random>_<case number>``), reached through a ``Store``
kept open on a thread of its own, so that cases never see each other's runs. A schema is
dropped when its case is over unless it is to be kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeAlias
from urllib.parse import urlsplit

import anyio
from anyio.from_thread import start_blocking_portal

from .._errors import RunNotFoundError
from .._store_url import store_for
from ..journal import AnyEvent, Decision, FileStore, Repinned, Resolved, Signal, Store, verify_file
from ..journal._layout import list_runs_dir
from ._scenario import CrashtestError

Answer: TypeAlias = Decision | Resolved | Signal | Repinned
"""A person's record the harness appends between two processes."""


class CaseStore(Protocol):
    """Where a case's run lives, as the harness sees it between two processes."""

    def read(self, run_id: str) -> list[AnyEvent]:
        """The run's durable events (none before it exists)."""
        ...

    def read_all(self) -> dict[str, list[AnyEvent]]:
        """Every run's durable events, by run id (the scenario's run and its child runs)."""
        ...

    def record(self, run_id: str, records: list[Answer]) -> None:
        """Append a person's records to the run, holding it as a worker would."""
        ...

    def buried(self) -> None:
        """The case's process was killed and reaped: what it held is nobody's any more."""
        ...


@dataclass(frozen=True)
class FileCase:
    """The case's ``FileStore``, rooted at ``root``."""

    root: Path

    def read(self, run_id: str) -> list[AnyEvent]:
        # Without a lock: no process runs the run meanwhile.
        path = FileStore(self.root).location(run_id)
        if not os.path.exists(path):
            return []
        return list(verify_file(path).events)

    def read_all(self) -> dict[str, list[AnyEvent]]:
        listing = list_runs_dir(str(self.root / "runs"))
        return {run_id: self.read(run_id) for run_id in sorted(listing.runs)}

    def record(self, run_id: str, records: list[Answer]) -> None:
        async def append() -> None:
            async with FileStore(self.root) as fs:
                await _append(fs, run_id, records)

        anyio.run(append)

    def buried(self) -> None:
        """Nothing to do: the kernel let go of a dead process's locks when it died."""


async def _append(store: Store, run_id: str, records: list[Answer]) -> None:
    journal = await store.open(run_id)
    async with journal:
        await journal.append(records)


class _PostgresCase:
    """The case's PostgreSQL schema, through a ``Store`` kept open on a thread of its own."""

    def __init__(self, store: Store, call: Callable[..., Any]) -> None:
        self._store = store
        self._call = call

    def read(self, run_id: str) -> list[AnyEvent]:
        try:
            events: list[AnyEvent] = self._call(self._store.read, run_id)
        except RunNotFoundError:
            return []
        return events

    def read_all(self) -> dict[str, list[AnyEvent]]:
        runs: list[str] = self._call(self._store.list_runs)
        return {run_id: self.read(run_id) for run_id in runs}

    def record(self, run_id: str, records: list[Answer]) -> None:
        self._call(_append, self._store, run_id, records)

    def buried(self) -> None:
        """End the leases and the worker advertisement the killed process left.

        A lease on PostgreSQL is a time, not a connection: a SIGKILLed worker's runs stay its
        own until the lease runs out. The harness saw the process die, so it ends them now
        instead of making the next process wait; children can then hold long leases that a
        loaded machine's stalls never outlast (``_child.PG_LEASE_TTL``).
        """
        self._call(_bury, self._store)


@contextmanager
def postgres_case(url: str, schema: str, *, keep: bool) -> Iterator[CaseStore]:
    """Open schema ``schema`` of the database at ``url`` (created if missing); drop it on the
    way out unless ``keep``.

    Raises:
        CrashtestError: the database cannot be used (not reachable now, refused, no right to
            create the schema); the message names it without its password.
    """
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        # At once: a crash test is run by a person at a terminal, who wants to hear that the
        # database is not there now rather than wait out an outage as a worker does.
        store = store_for(url, schema=schema, start_wait=0.0)
        try:
            stack.enter_context(portal.wrap_async_context_manager(store))
        except Exception as exc:  # not reachable, refused, no right to create the schema
            raise CrashtestError(
                f"cannot use the store {redact_url(url)}: {type(exc).__name__}: {exc}"
            ) from exc
        if not keep:
            stack.callback(portal.call, _drop_schema, store)
        yield _PostgresCase(store, portal.call)


async def _bury(store: Store) -> None:
    from ..postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    s = store.sql.schema
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute(f"UPDATE {s}.runs SET expires_at = now() WHERE expires_at > now()")
        await conn.execute(f"DELETE FROM {s}.workers")


async def _drop_schema(store: Store) -> None:
    from ..postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    await store.pool.execute(f"DROP SCHEMA IF EXISTS {store.sql.schema} CASCADE")


def redact_url(url: str) -> str:
    """``url`` without its password (or anything past the host when it cannot be parsed)."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.partition("://")[0] + "://..."
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"
