"""Each console test runs against a real store: a directory, and PostgreSQL."""

from __future__ import annotations

import pathlib

import anyio
import pytest

from ..cli._stores import Env
from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ._envs import PgEnv


@pytest.fixture
def file_env(tmp_path: pathlib.Path) -> Env:
    env = Env(tmp_path / "store")
    anyio.run(env.build)
    return env


@pytest.fixture(params=["file", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Env:
    if request.param == "file":
        built = Env(tmp_path / "store")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        built = PgEnv(pathlib.Path("unused"), dsn=dsn, schema=request.getfixturevalue("pg_schema"))
    anyio.run(built.build)
    return built
