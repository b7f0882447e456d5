"""What a benchmark here ran on: ``tether.bench``'s machine block, plus limits and versions."""

from __future__ import annotations

import importlib.metadata
import resource
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tether.bench import machine_info as _tether_machine_info
from tether.bench import mount_of as mount_of

__all__ = ["machine_info", "mount_of", "package_version"]


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(root: Path, *, packages: Iterable[str] = ()) -> dict[str, Any]:
    """The machine, interpreter and filesystem of a run in ``root`` (``tether.bench``'s keys),
    the descriptor limit and, under ``packages``, the version of each package named."""
    return {
        **_tether_machine_info(root),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "packages": {name: package_version(name) for name in ("tether", *packages)},
    }
