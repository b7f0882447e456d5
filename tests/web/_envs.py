"""Stores holding real runs for the console tests: the operator tests' runs, on files or
PostgreSQL, and a console over them with a client that speaks to it in-process."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest

import tether.web
from tether.journal import AnyEvent
from tether.postgres import PostgresStore

from ..cli._stores import BLOB_THRESHOLD, Env

PRIYA = "priya-token-0123456789abcdef"
SAM = "sam-token-0123456789abcdef00"
TOKENS = {PRIYA: "priya", SAM: "sam"}
BASE = "http://console.test"


@dataclass
class PgEnv(Env):
    """The same runs in a PostgreSQL schema of their own."""

    dsn: str = ""
    schema: str = ""

    def store(self) -> PostgresStore:  # type: ignore[override]
        return PostgresStore(self.dsn, schema=self.schema, blob_threshold=BLOB_THRESHOLD)

    async def events(self, run_id: str) -> list[AnyEvent]:
        async with self.store() as store:
            return await store.read(run_id)


def store_flags(env: Env) -> list[str]:
    """The command line's flags for ``env``'s store."""
    if isinstance(env, PgEnv):
        return ["--store", env.dsn, "--schema", env.schema]
    return ["--root", env.r]


def auth(token: str = PRIYA) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@asynccontextmanager
async def console(
    env: Env, *, base_url: str = BASE, **options: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """A console over ``env``'s store (entered for the test) and a client of it."""
    options.setdefault("tokens", TOKENS)
    async with env.store() as store:
        application = tether.web.app(store, **options)
        transport = httpx2.ASGITransport(app=application)
        async with httpx2.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client


async def sign_in(client: httpx2.AsyncClient, token: str = PRIYA) -> str:
    """Sign ``client`` in through the login form; return the session's CSRF token."""
    response = await client.post("/login", data={"token": token, "next": "/"})
    assert response.status_code == 303, response.text
    who = await client.get("/api/whoami")
    csrf: str = who.json()["csrf"]
    return csrf


def file_env(tmp_path: pathlib.Path) -> Env:
    return Env(tmp_path / "store")


def env_on(kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Env:
    """The operator tests' runs, built on a directory store (``kind`` ``"file"``) or in a
    PostgreSQL schema of their own (``"postgres"``: needs the ``pg_dsn`` fixture)."""
    if kind == "file":
        built = Env(tmp_path / "store")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        built = PgEnv(pathlib.Path("unused"), dsn=dsn, schema=request.getfixturevalue("pg_schema"))
    anyio.run(built.build)
    return built
