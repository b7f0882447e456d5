"""Shared fixtures."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from hypothesis import settings

from ._disk import small_fs as small_fs  # a small filesystem that fills up (see _disk)
from ._timeouts import pytest_report_header as pytest_report_header  # (scaled timeouts)
from ._timeouts import pytest_runtest_protocol as pytest_runtest_protocol

# No time limit per example: hypothesis's default (200 ms) is a timed assertion, and on a
# loaded machine an example of a pure check fails it (seen at load 6 with the suite on two
# workers). A test that is about time sets its own deadline.
settings.register_profile("tether", deadline=None)
settings.load_profile("tether")


@pytest.fixture
def store_root(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh, empty directory for a store."""
    root = tmp_path / "store"
    root.mkdir()
    return root


@pytest.fixture(scope="session", autouse=True)
def _child_bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Let the session's child processes cache bytecode, outside the source tree.

    The suite starts hundreds of short-lived Python processes (crash-test children, workers,
    the command line). Where the environment sets ``PYTHONDONTWRITEBYTECODE``, each of them
    would compile tether from source again; a shared ``PYTHONPYCACHEPREFIX`` under the
    session's temporary directory saves that and writes nothing next to the sources. Only
    child processes see the change: this interpreter read both variables when it started.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        mp.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield
