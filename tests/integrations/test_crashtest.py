"""Each framework's example agent passes ``tether crashtest`` at every crash point, on files and
on PostgreSQL: no refund made twice, and no recorded model response asked for again.

The examples' models log every request they really get (``requests.log`` in each case's
world). The uninterrupted baseline makes the fewest; a case may make more only where its
process was killed between a model's answer and its save (``extra_model_calls``, which the
harness explains by that kill): a request the journal had answered is never made again.
"""

from __future__ import annotations

import pathlib

import pytest

from tether.testing import Report, assert_crash_safe

from ..postgres.conftest import pg_dsn, pg_server  # noqa: F401

SCENARIOS = {
    "pydantic_ai": ("examples.pydantic_ai_agent:scenario", 19),
    "openai_agents": ("examples.openai_agents_app:scenario", 24),
}


def check_requests(report: Report, root: pathlib.Path) -> None:
    counts = [
        len(log.read_text(encoding="utf-8").splitlines()) for log in root.rglob("requests.log")
    ]
    assert len(counts) == len(report.cases) + 1  # each case and the baseline
    fewest = min(counts)
    assert sum(count - fewest for count in counts) <= sum(c.extra_model_calls for c in report.cases)
    assert report.duplicates == 0
    assert report.lost_records == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", sorted(SCENARIOS))
def test_the_example_agent_is_crash_safe_on_files(framework: str, tmp_path: pathlib.Path) -> None:
    target, points = SCENARIOS[framework]
    report = assert_crash_safe(target, min_points=points, root=tmp_path, workers=2)
    check_requests(report, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", sorted(SCENARIOS))
def test_the_example_agent_is_crash_safe_on_postgres(
    framework: str,
    tmp_path: pathlib.Path,
    pg_dsn: str,  # noqa: F811
) -> None:
    target, points = SCENARIOS[framework]
    report = assert_crash_safe(target, min_points=points, root=tmp_path, store=pg_dsn, workers=2)
    check_requests(report, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_pydantic_ai_agent_on_an_mcp_server_is_crash_safe_on_files(
    tmp_path: pathlib.Path,
) -> None:
    """Killed after each MCP tool returned and after each result was saved: the reply the
    server sends is sent once (its key dedupes the call run again), and a saved result is
    never asked of the server again."""
    report = assert_crash_safe(
        "examples.pydantic_ai_mcp_agent:scenario",
        points=["tool_returned", "result_saved"],
        min_points=6,
        root=tmp_path,
        workers=2,
    )
    check_requests(report, tmp_path)
