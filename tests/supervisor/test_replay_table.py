"""The replay decision, from a table: what ``next_step`` does with each kind of open call.

Each row builds the journal of one call (its tool's contract, and what happened to it) and
names the step the decision must give; the loop only carries steps out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.journal import (
    AnyEvent,
    ChildEnded,
    Decision,
    Escalated,
    Event,
    ModelResponse,
    Resolved,
    Resumed,
    RunStarted,
    Signal,
    ToolFailed,
    ToolStarted,
    Waiting,
)
from tether.supervisor._replay import (
    Escalate,
    Record,
    Rest,
    RetryAt,
    Run,
    Step,
    Verify,
    WaitForPerson,
    next_step,
)
from tether.supervisor._state import RunStatus, fold
from tether.supervisor._status import run_status, world_wait

from ._helpers import manifest_for

CALL = "toolu_1"
NOW = 1_000.0


async def _verify(order: str) -> str | None:
    return None


def registry() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    async def act(order: str) -> str:
        """Act on an order."""
        return "ok"

    tools.register(act, name="rerun_tool", policy="rerun")
    tools.register(act, name="key_tool", policy="idempotency_key")
    tools.register(act, name="verify_tool", policy="verify", verify=_verify)
    tools.register(act, name="escalate_tool")
    tools.register(act, name="gated", policy="rerun", approval=True, approval_timeout=60)
    tools.register(
        act,
        name="gated_escalates",
        approval=True,
        approval_timeout=60,
        on_approval_timeout="escalate",
    )
    tools.register(act, name="flaky", policy="escalate", retries=2, retry_on=ConnectionError)
    tools.register(act, name="slow_rerun", policy="rerun", timeout=5, retries=1)
    tools.register(act, name="slow_escalate", timeout=5, retries=1)
    tools.register(act, name="slow_verify", policy="verify", verify=_verify, timeout=5)
    return tools


TOOLS = registry()
MODEL = tether.ScriptedModel(["x"])


def step_for(tool: str, events: Sequence[Event], *, args: Any = None) -> Step:
    """The decision for call ``CALL`` of ``tool``, after ``events`` (at ``NOW``)."""
    started = RunStarted(run_id="r", manifest=manifest_for(MODEL, TOOLS), messages=[])
    block = {"type": "tool_use", "id": CALL, "name": tool, "input": args or {"order": "o-1"}}
    answer = ModelResponse(message={"role": "assistant", "content": [block]}, at=NOW - 10)
    journal: list[AnyEvent] = [
        msgspec.structs.replace(e, seq=i)  # type: ignore[misc]
        for i, e in enumerate([started, answer, *events])
    ]
    state = fold(journal)
    spec = TOOLS.get(tool) if tool in TOOLS else None
    return next_step(state, state.calls[CALL], spec, NOW)


started = ToolStarted(call_id=CALL, attempt=1)
timed_out = ToolFailed(call_id=CALL, attempt=1, error="timed out after 5 s", timed_out=True)


def unsent(attempts: int, retry_at: float) -> list[Event]:
    """``attempts`` attempts that never reached the tool's service, the last one's next try at
    ``retry_at``."""
    events: list[Event] = []
    for n in range(1, attempts + 1):
        at = retry_at if n == attempts else NOW - 100
        events += [
            ToolStarted(call_id=CALL, attempt=n),
            ToolFailed(call_id=CALL, attempt=n, error="down", retry_at=at, unsent=True),
        ]
    return events


@pytest.mark.parametrize(
    ("tool", "events", "want"),
    [
        # never started
        ("rerun_tool", [], Run(1)),
        ("escalate_tool", [], Run(1)),
        # started, no outcome: the tool's policy decides
        ("rerun_tool", [started], Run(2)),
        ("key_tool", [started], Run(2)),
        ("verify_tool", [started], Verify()),
        ("escalate_tool", [started], Escalate),
        # a person's answers
        (
            "escalate_tool",
            [started, Escalated(call_id=CALL, reason="r"), Resolved(call_id=CALL, outcome="retry")],
            Run(2),
        ),
        (
            "escalate_tool",
            [
                started,
                Escalated(call_id=CALL, reason="r"),
                Resolved(call_id=CALL, outcome="succeeded", result=1),
            ],
            Record,
        ),
        # approvals
        ("gated", [], WaitForPerson()),
        ("gated", [Decision(call_id=CALL, approved=True, by="p", at=NOW - 5)], Run(1)),
        ("gated", [Decision(call_id=CALL, approved=False, by="p", at=NOW - 5)], Record),
        # retries after an error in retry_on, at their time
        (
            "flaky",
            [started, ToolFailed(call_id=CALL, attempt=1, error="e", retry_at=NOW + 5)],
            RetryAt(NOW + 5, 2),
        ),
        (
            "flaky",
            [started, ToolFailed(call_id=CALL, attempt=1, error="e", retry_at=NOW - 1)],
            Run(2),
        ),
        # a service that could not be reached (nothing sent): rest, then again, whatever
        # the policy and however many retries the tool has (none, here) or attempts it took
        ("escalate_tool", unsent(1, NOW + 5), Rest()),
        ("escalate_tool", unsent(1, NOW - 1), Run(2)),
        ("verify_tool", unsent(7, NOW - 1), Run(8)),
        ("rerun_tool", unsent(3, NOW + 60), Rest()),
        ("flaky", unsent(4, NOW), Run(5)),
        # timeouts: an unknown outcome, through the policy while retries are left
        ("slow_rerun", [started, timed_out], Run(2)),
        ("slow_escalate", [started, timed_out], Escalate),
        ("slow_verify", [started, timed_out], Verify),
        # waits
        ("rerun_tool", [started, Waiting(call_id=CALL, attempt=1, until=NOW + 60)], Rest()),
        (
            "rerun_tool",
            [started, Waiting(call_id=CALL, attempt=1, until=NOW - 1, result="r")],
            Record,
        ),
        ("rerun_tool", [started, Waiting(call_id=CALL, attempt=1, event="paid")], Rest()),
        (
            "rerun_tool",
            [
                Signal(name="paid", signal_id="s1"),
                started,
                Waiting(call_id=CALL, attempt=1, event="paid"),
            ],
            Record,
        ),
        # a tool this run did not pin, and arguments that do not fit
        ("no_such_tool", [], Record),
    ],
)
def test_the_replay_decision(tool: str, events: list[Event], want: Any) -> None:
    got = step_for(tool, events)
    if isinstance(want, type):
        assert isinstance(got, want), got
    else:
        assert got == want


def test_the_approval_deadline_wins_over_a_late_approval() -> None:
    late = Decision(call_id=CALL, approved=True, by="p", at=NOW - 10 + 61)
    got = step_for("gated", [late])
    assert isinstance(got, Record)
    assert "no decision before the approval deadline (60 s)" in str(got.records[-1])
    escalated = step_for("gated_escalates", [late])
    assert escalated == Escalate("approval deadline passed")


def test_a_call_with_bad_arguments_gets_an_error_result() -> None:
    got = step_for("rerun_tool", [], args={"nope": 1})
    assert isinstance(got, Record)
    assert "invalid arguments for rerun_tool" in str(got.records[0])


def test_attempts_never_sent_spend_no_retry_and_no_tool_call() -> None:
    """The fold counts only what reached the tool's service: ``max_tool_calls`` and the
    tool's ``retries`` are spent by the attempts that were sent, and the status names what
    the run waits for, until the next try."""
    started_ = RunStarted(run_id="r", manifest=manifest_for(MODEL, TOOLS), messages=[])
    block = {"type": "tool_use", "id": CALL, "name": "flaky", "input": {"order": "o-1"}}
    answer = ModelResponse(message={"role": "assistant", "content": [block]}, at=NOW - 10)
    down = "tool 'flaky': connection refused"
    events: list[Event] = [
        started_,
        answer,
        ToolStarted(call_id=CALL, attempt=1),
        ToolFailed(call_id=CALL, attempt=1, error="ConnectionError: reset", retry_at=NOW - 50),
        ToolStarted(call_id=CALL, attempt=2),
        ToolFailed(call_id=CALL, attempt=2, error=down, retry_at=NOW - 20, unsent=True),
        ToolStarted(call_id=CALL, attempt=3),
        ToolFailed(call_id=CALL, attempt=3, error=down, retry_at=NOW + 30, unsent=True),
    ]
    journal: list[AnyEvent] = [
        msgspec.structs.replace(e, seq=i)  # type: ignore[misc]
        for i, e in enumerate(events)
    ]
    state = fold(journal)
    call = state.calls[CALL]
    assert (call.attempts, call.failures, call.unsent) == (3, 1, 2)
    assert state.tool_calls == 1  # attempt 1 was sent; 2 and 3 never left the process
    standing = run_status(state, NOW)
    assert standing.status is RunStatus.SLEEPING
    assert standing.wake_at == NOW + 30
    assert standing.reason == (
        "flaky (toolu_1) waiting for its service: tool 'flaky': connection refused; nothing "
        "was sent (tried 2 times in a row); next try at 1970-01-01 00:17:10 UTC"
        "; resolve it to give the model a result, or cancel the run"
    )
    assert run_status(state, NOW + 30).status is RunStatus.RUNNING


_waits = st.one_of(
    st.builds(lambda t: Waiting(call_id=CALL, attempt=1, until=t), st.floats(900, 1100)),
    st.builds(
        lambda t: Waiting(call_id=CALL, attempt=1, event="paid", until=t),
        st.one_of(st.none(), st.floats(900, 1100)),
    ),
    st.just(Waiting(call_id=CALL, attempt=1, child={"run_id": "r.c", "messages": []})),
)
_world = st.lists(
    st.sampled_from(
        [
            Signal(name="paid", signal_id="s1", payload=1),
            Signal(name="other", signal_id="s2"),
            ChildEnded(call_id=CALL, child="r.c", status="done", final_text="hi"),
        ]
    ),
    max_size=3,
    unique=True,
)


@given(wait=_waits, world=_world, now=st.floats(800, 1200))
def test_the_status_and_the_replay_decision_agree_on_when_a_wait_is_over(
    wait: Waiting, world: list[Event], now: float
) -> None:
    """One rule (``wait_at``): where the status says a call no longer waits, the replay
    decision records its result; where it still waits, the decision is to rest."""
    started = RunStarted(run_id="r", manifest=manifest_for(MODEL, TOOLS), messages=[])
    block = {"type": "tool_use", "id": CALL, "name": "rerun_tool", "input": {"order": "o-1"}}
    answer = ModelResponse(message={"role": "assistant", "content": [block]}, at=NOW - 10)
    journal: list[AnyEvent] = [
        msgspec.structs.replace(e, seq=i)  # type: ignore[misc]
        for i, e in enumerate([started, answer, ToolStarted(call_id=CALL, attempt=1), wait, *world])
    ]
    state = fold(journal)
    call = state.calls[CALL]
    step = next_step(state, call, TOOLS.get("rerun_tool"), now)
    waiting = world_wait(state, call, now)
    assert (waiting is None) == isinstance(step, Record), (waiting, step)
    assert (waiting is not None) == isinstance(step, Rest)
    assert (run_status(state, now).status is RunStatus.RUNNING) == (waiting is None)


def test_an_attempt_never_sent_is_no_progress_against_a_crash_loop() -> None:
    """Two calls of one turn: one waits for its service, the other kills its process each
    time it runs. The unsent attempts between the crashes must not reset the count of
    interruptions in a row, or the crash loop is never noticed and the sibling runs forever."""
    blocks = [
        {"type": "tool_use", "id": CALL, "name": "rerun_tool", "input": {"order": "o-1"}},
        {"type": "tool_use", "id": "toolu_2", "name": "rerun_tool", "input": {"order": "o-2"}},
    ]
    events: list[Event] = [
        RunStarted(run_id="r", manifest=manifest_for(MODEL, TOOLS), messages=[]),
        ModelResponse(message={"role": "assistant", "content": blocks}, at=NOW - 10),
    ]
    for n in (1, 2, 3):
        events += [
            ToolStarted(call_id=CALL, attempt=n),
            ToolStarted(call_id="toolu_2", attempt=n),
            ToolFailed(call_id=CALL, attempt=n, error="down", retry_at=NOW - 1, unsent=True),
            Resumed(attempt=n, cause="crash"),
        ]
    state = fold([msgspec.structs.replace(e, seq=i) for i, e in enumerate(events)])  # type: ignore[misc]
    assert state.interruptions == 3


def test_a_status_about_another_call_still_names_the_service_wait() -> None:
    """An approval beside a call that waits for its service: the run waits for approval, and
    its reason says the other call waits for its service too (the one status decision)."""
    blocks = [
        {"type": "tool_use", "id": CALL, "name": "rerun_tool", "input": {"order": "o-1"}},
        {"type": "tool_use", "id": "toolu_2", "name": "gated", "input": {"order": "o-2"}},
    ]
    events: list[Event] = [
        RunStarted(run_id="r", manifest=manifest_for(MODEL, TOOLS), messages=[]),
        ModelResponse(message={"role": "assistant", "content": blocks}, at=NOW - 10),
        *unsent(2, NOW + 30),
    ]
    state = fold([msgspec.structs.replace(e, seq=i) for i, e in enumerate(events)])  # type: ignore[misc]
    standing = run_status(state, NOW)
    assert standing.status is RunStatus.WAITING_FOR_APPROVAL
    assert standing.reason.startswith("approval needed for gated (toolu_2); meanwhile ")
    assert "rerun_tool (toolu_1) waiting for its service: down; nothing was sent" in (
        standing.reason
    )
