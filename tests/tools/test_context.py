"""``ToolContext`` and the policy enums."""

from __future__ import annotations

import dataclasses

import pytest

from tether.tools import ApprovalTimeout, ReplayPolicy, ToolContext


def test_idempotency_key_is_run_and_call() -> None:
    ctx = ToolContext(run_id="run-7", call_id="toolu_01", attempt=1)
    assert ctx.idempotency_key == "run-7:toolu_01"


def test_idempotency_key_is_the_same_on_every_attempt() -> None:
    first = ToolContext(run_id="r", call_id="c", attempt=1)
    third = ToolContext(run_id="r", call_id="c", attempt=3)
    assert first.idempotency_key == third.idempotency_key


def test_context_is_frozen_and_keyword_only() -> None:
    ctx = ToolContext(run_id="r", call_id="c", attempt=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.attempt = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        ToolContext("r", "c", 1)  # type: ignore[call-arg]


def test_policy_values() -> None:
    assert [p.value for p in ReplayPolicy] == ["rerun", "idempotency_key", "verify", "escalate"]
    assert ReplayPolicy("verify") is ReplayPolicy.VERIFY
    assert isinstance(ReplayPolicy.RERUN, str)
    assert f"{ReplayPolicy.RERUN}" == "rerun"


def test_approval_timeout_values() -> None:
    assert [a.value for a in ApprovalTimeout] == ["reject", "escalate"]
