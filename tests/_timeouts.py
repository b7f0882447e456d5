"""Test timeouts that grow with the machine's load, so a loaded CI machine is not a failure.

A test's timeout (``pytest-timeout``: its ``timeout`` marker, ``--timeout``, or the ``timeout``
of ``pyproject.toml``) guards against a hang; it says nothing about speed, which benchmarks
measure. The slow matrices (crash tests that start a hundred processes) take several times
longer on a machine whose cores are busy with other work, and hit a timeout sized for an idle
one. So each test's timeout is multiplied, as the test starts, by how loaded the machine is:
the one-minute load average per core, at least 1 and at most ``MAX_SCALE``
(``TETHER_TEST_TIMEOUT_SCALE`` sets the factor instead). A real hang is still caught, later.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

MAX_SCALE = 8.0
SCALE_ENV = "TETHER_TEST_TIMEOUT_SCALE"
APPLIED = pytest.StashKey[float]()
"""The factor a test's timeout was multiplied by (in ``item.stash``)."""


def load_scale(load: float, cores: int, forced: str | None = None) -> float:
    """The factor for timeouts on a machine with this one-minute ``load`` average and
    ``cores``; ``forced`` (the environment's setting) wins."""
    if forced:
        return float(forced)
    return min(MAX_SCALE, max(1.0, load / max(1, cores)))


def current_scale() -> float:
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here: no scaling
        load = 0.0
    return load_scale(load, os.cpu_count() or 1, os.environ.get(SCALE_ENV))


def _timeout_of(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Before ``pytest-timeout`` reads it: put a scaled timeout marker first on the test."""
    timeout = _timeout_of(item)
    scale = current_scale()
    item.stash[APPLIED] = scale
    if timeout and scale > 1:
        item.add_marker(pytest.mark.timeout(timeout * scale), append=False)
    yield


def pytest_report_header(config: pytest.Config) -> str:
    return f"timeouts scaled by the machine's load (tests/_timeouts.py): x{current_scale():.1f}"
