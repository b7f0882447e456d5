"""Where a benchmark runs and what it was measured on (saved beside every result file)."""

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

REPO_ROOT = Path(__file__).resolve().parent.parent


def mount_of(path: Path) -> tuple[str, str, str]:
    """``(device, mount point, filesystem type)`` of the mount holding ``path``."""
    real = os.path.realpath(path)
    best = ("?", "/", "?")
    with open("/proc/mounts", encoding="utf-8") as f:
        for line in f:
            dev, mnt, fstype, *_ = line.split()
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best[1]):
                best = (dev, mnt, fstype)
    return best


def machine_info(root: Path) -> dict[str, Any]:
    """The machine, interpreter and filesystem of a benchmark run in ``root``."""
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
def scratch_dir(base: Path | None, prefix: str) -> Iterator[Path]:
    """A scratch directory on a real disk, removed afterwards.

    The default is next to the checkout rather than the system temp dir, which may be a tmpfs
    where ``fdatasync`` costs nothing.
    """
    parent = base if base is not None else REPO_ROOT.parent
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
