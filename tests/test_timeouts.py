"""Timeouts grow with the machine's load (``tests/_timeouts.py``)."""

from __future__ import annotations

import pytest

from ._timeouts import APPLIED, MAX_SCALE, load_scale


@pytest.mark.parametrize(
    ("load", "cores", "forced", "scale"),
    [
        (0.3, 2, None, 1.0),  # idle: the timeout as written
        (2.0, 2, None, 1.0),
        (10.0, 2, None, 5.0),  # load 10 on two cores: five times as long
        (100.0, 2, None, MAX_SCALE),  # bounded: a hang is still caught
        (10.0, 2, "1", 1.0),  # TETHER_TEST_TIMEOUT_SCALE decides
        (0.0, 2, "3", 3.0),
    ],
)
def test_the_scale_follows_the_load_per_core(
    load: float, cores: int, forced: str | None, scale: float
) -> None:
    assert load_scale(load, cores, forced) == scale


@pytest.mark.timeout(7)
def test_a_tests_timeout_is_scaled_as_it_starts(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    assert marker.args[0] == 7 * request.node.stash[APPLIED]


def test_the_default_timeout_is_scaled_too(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    scale = request.node.stash[APPLIED]
    if scale == 1:
        assert marker is None  # the configured 300 s applies as it is
    else:
        assert marker is not None
        assert marker.args[0] == float(request.config.getini("timeout")) * scale
