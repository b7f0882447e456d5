"""An outage that lasts: after a thousand tries (a tool's service down for about 17 hours, a
model down as long) the next wait is still the cap, not an ``OverflowError`` that crashes
the run's task over and over until the crash loop parks it.

``2.0 ** 1024`` does not fit a float, so the doubling must stop once the wait reaches its cap.
"""

from __future__ import annotations

import tether
from tether._backoff import MODEL_RETRY, SERVICE_RETRY, TOOL_RETRY, Backoff
from tether.journal import ModelFailed
from tether.supervisor._attempt import unsent
from tether.supervisor._reply import model_failed
from tether.supervisor._runtime import Runtime
from tether.supervisor._state import Call, RunState
from tether.testing import VirtualClock


def half() -> float:
    return 0.5


def test_the_wait_stays_at_its_cap_however_many_tries() -> None:
    for backoff in (MODEL_RETRY, TOOL_RETRY, SERVICE_RETRY, Backoff(first=0.25, cap=4.0)):
        assert [backoff.delay(n, half) for n in (1, 2)] == [backoff.first, 2 * backoff.first]
        for tries in (1_025, 2_000, 10**6):
            assert backoff.delay(tries, half) == backoff.cap


def test_a_tool_call_never_sent_two_thousand_times_waits_a_minute() -> None:
    """The record of the 2,001st unsent try of a call still says when to try again."""
    clock = VirtualClock()
    call = Call(id="toolu_1", name="search", input={}, started_at=0.0, attempts=2_000)
    call.unsent = 2_000
    ctx = tether.ToolContext(run_id="run-1", call_id="toolu_1", attempt=2_001)
    failed = unsent(call, ctx, "connection refused", clock=clock, jitter=half)
    assert failed.unsent
    assert failed.retry_at == clock.time() + 60.0


def test_a_model_down_for_two_thousand_calls_is_asked_again_in_a_minute() -> None:
    clock = VirtualClock()
    rt = Runtime(
        model=tether.ScriptedModel([]),
        tools=tether.ToolRegistry(),
        load_blob=_no_blob,
        wall_clock=clock,
        jitter=half,
    )
    state = RunState(run_id="run-1")
    state.model_failures = 2_000
    error = tether.ModelError("claude-haiku-4-5", "overloaded", transient=True)
    (failed,) = model_failed(state, rt, "run-1", error)
    assert isinstance(failed, ModelFailed)
    assert failed.retry_at == clock.time() + 60.0


async def _no_blob(ref: object) -> object:
    raise AssertionError("no blob is read")
