"""Where a benchmark runs and what it ran on: the machine block saved beside every result."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
"""Filesystems held in memory, where ``fdatasync`` costs nothing: a figure measured there says
nothing about a disk."""


def mount_of(path: str | os.PathLike[str]) -> tuple[str, str, str]:
    """``(device, mount point, filesystem type)`` of the mount holding ``path``.

    The longest mount point that contains the resolved path wins (``/proc/mounts``, so Linux
    only); ``("?", "/", "?")`` where nothing is known.
    """
    real = os.path.realpath(path)
    best = ("?", "/", "?")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return best
    for line in lines:
        dev, mnt, fstype, *_ = line.split()
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best[1]):
            best = (dev, mnt, fstype)
    return best


def machine_info(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The machine, interpreter and filesystem of a benchmark run in ``root``.

    Keys: ``date`` (UTC, ISO 8601), ``cpu_count``, ``platform``, ``python``,
    ``implementation``, ``bench_dir``, ``device``, ``mount_point``, ``filesystem``,
    ``sqlite`` (the library's version). Benchmarks add their own keys beside these.
    """
    dev, mnt, fstype = mount_of(root)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "bench_dir": str(root),
        "device": dev,
        "mount_point": mnt,
        "filesystem": fstype,
        "sqlite": sqlite3.sqlite_version,
    }


@contextmanager
def scratch_dir(parent: str | os.PathLike[str], prefix: str) -> Iterator[Path]:
    """A new directory inside ``parent`` (which must exist), removed with all it holds on exit.

    The path yielded is absolute, whatever ``parent`` was.

    Raises:
        NotADirectoryError: ``parent`` is not a directory.
        OSError: the directory cannot be created there (``parent`` missing, not writable).
    """
    base = Path(parent)
    if base.exists() and not base.is_dir():
        raise NotADirectoryError(f"{base} is not a directory")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base)).absolute()  # the report names it
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
