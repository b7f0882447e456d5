"""Shared fixtures."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture
def store_root(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh, empty directory for a store."""
    root = tmp_path / "store"
    root.mkdir()
    return root
