"""Naming a store in one string: a directory (``FileStore``) or a ``postgresql://`` URL.

Used by the command line (``--root DIR`` / ``--store URL``) and by child processes of the
crash-test harness, which must open the same store as their parent.
"""

from __future__ import annotations

from typing import Any

from .journal import FileStore, Store

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(spec: str) -> bool:
    return spec.startswith(POSTGRES_SCHEMES)


def store_for(spec: str, *, schema: str = "tether", **options: Any) -> Store:
    """The store ``spec`` names, not entered yet.

    ``options`` go to ``PostgresStore`` (``lease_ttl``, ``pool_size``, ...) for a URL and to
    ``FileStore`` for a directory.
    """
    if is_postgres(spec):
        from .postgres import PostgresStore

        return PostgresStore(spec, schema=schema, **options)
    return FileStore(spec, **options)
