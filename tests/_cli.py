"""The ``tether`` command run as a process of its own, from the repository's root."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_tether(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``tether ARGV`` in a new process; its exit code and output (never raises for them)."""
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
