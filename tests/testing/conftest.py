"""Fixtures of the crash-test harness tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _child_bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One bytecode cache, outside the source tree, for every child process of the session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        mp.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield
