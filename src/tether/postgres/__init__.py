"""The PostgreSQL store: runs shared by workers on many machines, held through fenced leases.

Needs the ``postgres`` extra (``pip install 'tether[postgres]'``, which brings ``asyncpg``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import on_demand as _on_demand

__all__ = ["PgJournal", "PostgresStore"]

ON_DEMAND = {"PgJournal": "tether.postgres._journal", "PostgresStore": "tether.postgres._store"}
"""Imported when first used, so that a helper module here (``_schema``, ``_connection``) can
be imported without the store."""

if TYPE_CHECKING:
    from ._journal import PgJournal as PgJournal
    from ._store import PostgresStore as PostgresStore
else:
    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})
