"""A run that parks passes the ``parked`` crash point, after its journal is closed."""

from __future__ import annotations

import pathlib

from tether.demo import KITEBASE
from tether.testing._drive import spawn


def test_a_run_that_parks_passes_the_parked_crash_point(tmp_path: pathlib.Path) -> None:
    result = spawn(KITEBASE.target(trace=True), tmp_path, 1, "start")
    assert result.returncode == 0, result.stderr
    assert "status: waiting_for_approval" in result.stdout
    assert result.points[-1] == "parked"
