"""Fixtures of the demo tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _child_bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Let the demos' child processes cache bytecode, outside the source tree.

    The demo tests start about a hundred short-lived Python processes. Where the environment
    sets ``PYTHONDONTWRITEBYTECODE``, each of them would compile tether from source again; a
    shared ``PYTHONPYCACHEPREFIX`` under the test session's temporary directory saves that
    and writes nothing next to the sources. Only child processes see the change: this
    interpreter read both variables when it started.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        mp.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield
