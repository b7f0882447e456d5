"""What a held run and its lease need of their ``PostgresStore``, as a protocol.

``PgJournal`` (``_journal``), leases (``_lease``) and fenced appends (``_append``) are written
against ``StoreParts``, not the store's class, so the modules form a ladder
(``_parts`` <- ``_journal`` <- ``_append``, ``_lease`` <- ``_store``) with no import back up:
the store builds on them, and they know of it only what this protocol names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncpg

    from ..journal import Event
    from ._journal import PgJournal
    from ._schema import Sql


class StoreParts(Protocol):
    """The parts of a ``PostgresStore`` a held run, its lease and its appends use."""

    sql: Sql
    owner: str
    lease_ttl: float
    statement_timeout: float
    reconnect_timeout: float

    @property
    def pool(self) -> asyncpg.Pool[Any]: ...

    def location(self, run_id: str) -> str: ...

    async def prepare(self, event: Event) -> Event:
        """``event`` redacted, its large payloads set aside as blobs."""
        ...

    async def append_rows(
        self,
        journal: PgJournal,
        first: int,
        payloads: list[bytes],
        finished: str | None,
        *,
        unless_queued: bool = False,
    ) -> bool | None:
        """The fenced append; ``False`` if it was rejected (a stale epoch); with
        ``unless_queued``, ``None`` if answers wait in the run's inbox (nothing written)."""
        ...

    async def why_rejected(self, journal: PgJournal) -> str: ...

    async def renew(self, journals: list[PgJournal]) -> None: ...

    async def renew_adverts(self) -> None: ...

    async def release(self, journal: PgJournal) -> None: ...

    async def _send(self, backend: list[int], query: str, *args: Any) -> str: ...

    async def _send_unless_queued(
        self, backend: list[int], run_id: str, query: str, *args: Any
    ) -> str | None: ...

    async def _retry(self, method: str, query: str, *args: Any) -> Any: ...
