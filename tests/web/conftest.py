"""Each console test runs against a real store: a directory, and PostgreSQL."""

from __future__ import annotations

import pathlib

import anyio
import pytest

from ..cli._stores import Env
from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ._envs import env_on


@pytest.fixture
def file_env(tmp_path: pathlib.Path) -> Env:
    env = Env(tmp_path / "store")
    anyio.run(env.build)
    return env


@pytest.fixture(params=["file", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Env:
    return env_on(request.param, request, tmp_path)
