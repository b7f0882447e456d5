"""``tether crashtest`` on an agent whose tools come from an MCP server (``examples.helpdesk_mcp``).

The server is a real one (the ``mcp`` SDK's server side, over stdio), started by every process
that runs the agent. Killed around each tool call, the run must come out as an uninterrupted
one: the read-only and idempotent tools run again, the reply is sent again with the same key
in ``_meta`` and the server sends nothing twice.
"""

from __future__ import annotations

import pytest

from tether.testing import assert_crash_safe

TOOL_POINTS = ["tool_started", "tool_returned", "result_saved"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_agent_on_mcp_tools_survives_a_kill_around_every_tool_call() -> None:
    report = assert_crash_safe("examples.helpdesk_mcp:scenario", points=TOOL_POINTS)
    assert report.ok, report.text()
    assert report.baseline.status == "done"
    assert report.baseline.ledger == {"reply KITE-7": 1, "status KITE-7 solved": 1}
    assert report.points == 9  # three tools, three points each
    assert report.duplicates == 0
    assert report.lost_records == 0
    assert report.differing == 0
    assert report.extra_calls_elsewhere == 0
    assert all(case.outcome == "ok" for case in report.cases)
    assert {k.point for case in report.cases for k in case.kills} == set(TOOL_POINTS)
