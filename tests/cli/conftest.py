"""A store with one real run per resting status, built fresh for each test."""

from __future__ import annotations

import pathlib

import anyio
import pytest

from ._stores import Env


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Env:
    built = Env(tmp_path / "store")
    anyio.run(built.build)
    return built
