"""The package is importable from anywhere, the clone's parent directory included.

A clone named ``tether`` seen from its parent directory is a folder ``tether`` without an
``__init__.py``: with the package at the top of the clone, ``import tether`` found that folder
first, as a namespace package, and failed (``module 'tether' has no attribute 'FileStore'``).
The package lives under ``src/``, so the clone's folder is never taken for it.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_import_tether_from_the_clones_parent_directory(tmp_path: pathlib.Path) -> None:
    (tmp_path / "tether").symlink_to(REPO, target_is_directory=True)  # the clone, by its name
    proc = subprocess.run(
        [sys.executable, "-c", "import tether; print(tether.FileStore.__name__)"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FileStore"
