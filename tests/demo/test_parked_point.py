"""A run that parks passes the ``parked`` crash point, after its journal is closed."""

from __future__ import annotations

import pathlib

from tether.demo import KITEBASE
from tether.demo._harness import spawn


def test_a_run_that_parks_passes_the_parked_crash_point(tmp_path: pathlib.Path) -> None:
    result = spawn(KITEBASE, tmp_path, 1, "start", trace=True)
    assert result.returncode == 0, result.stderr
    assert "status: waiting_for_approval" in result.stdout
    assert result.points[-1] == "parked"
