"""Shared fixtures."""

from __future__ import annotations

import pathlib

import pytest

from ._disk import small_fs as small_fs  # a small filesystem that fills up (see _disk)
from ._timeouts import pytest_report_header as pytest_report_header  # (scaled timeouts)
from ._timeouts import pytest_runtest_protocol as pytest_runtest_protocol


@pytest.fixture
def store_root(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh, empty directory for a store."""
    root = tmp_path / "store"
    root.mkdir()
    return root
