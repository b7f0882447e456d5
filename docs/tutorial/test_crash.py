"""The support agent is crash-safe: a test for your suite (``python -m pytest``)."""

from __future__ import annotations

from tether.testing import assert_crash_safe


def test_the_support_agent_is_crash_safe() -> None:
    report = assert_crash_safe("crash:scenario", min_points=8)
    assert report.duplicates == 0
