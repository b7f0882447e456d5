"""A burst of starts on a ``PostgresStore`` waits for a connection of the pool rather than
failing: the pool (``pool_size``) is its analogue of a ``FileStore``'s descriptor budget."""

from __future__ import annotations

import pathlib

import pytest

from ..supervisor.test_descriptors import BURST, burst


@pytest.mark.slow
def test_a_burst_of_starts_waits_for_a_connection(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str
) -> None:
    """2,000 ``sup.start`` calls at once, under 256 descriptors, on a pool of 16 connections:
    every run starts and finishes; 2,000 parked runs hold no connection and no descriptor."""
    report = burst(tmp_path, 256, env={"TETHER_TEST_STORE": f"{pg_dsn}#{pg_schema}"})
    assert report["failed"] == 0, report["errors"]
    assert report["statuses"] == {"done": BURST}
    assert report["parked"] == {"waiting_for_approval": BURST}
    assert report["parked_fds"] <= 2  # type: ignore[operator]
