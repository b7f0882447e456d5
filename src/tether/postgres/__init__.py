"""The PostgreSQL store: runs shared by workers on many machines, held through fenced leases.

Needs the ``postgres`` extra (``pip install 'tether[postgres]'``, which brings ``asyncpg``).
"""

from __future__ import annotations

from .._public import publish as _publish
from ._journal import PgJournal as PgJournal
from ._store import PostgresStore as PostgresStore

__all__ = ["PgJournal", "PostgresStore"]

_publish(__name__, globals(), __all__)
