"""An answer with many tool calls costs work linear in its calls: counted, never timed.

The count is of Python function calls (``cProfile``'s, which are deterministic), for an answer
of ``SMALL`` calls and one of ten times as many: linear work gives about ten times the calls,
a step that looks at every call for each call (or at every event for each call) about a
hundred. ``bench/wide_answer.py`` gives the times.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import tether
from tether.journal import AnyEvent, Event, ModelResponse, RunStarted, ToolResult, ToolStarted
from tether.supervisor._state import fold

from ..journal._journals import stamp
from ._helpers import WAIT, manifest_for

SMALL = 200
LINEAR = 12.0
"""The most the ten-times-larger case may cost, in times the small one (linear gives ~10)."""


@contextmanager
def counting() -> Iterator[list[int]]:
    """Count the Python function calls made in the block (into the one-item list yielded)."""
    profile = cProfile.Profile()
    made: list[int] = []
    profile.enable()
    try:
        yield made
    finally:
        profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        made.append(sum(nc for _cc, nc, _tt, _ct, _callers in stats.values()))


def wide_journal(calls: int) -> list[AnyEvent]:
    """A run whose one answer calls ``calls`` tools, each started and answered in order."""
    model = tether.ScriptedModel(["x"])
    events: list[Event] = [
        RunStarted(run_id="wide", manifest=manifest_for(model, tether.ToolRegistry()), messages=[])
    ]
    blocks = [tether.ScriptedModel.tool_use(f"t{i}", "look", {"i": i}) for i in range(calls)]
    events.append(ModelResponse(message={"role": "assistant", "content": blocks}))
    for i in range(calls):
        events.append(ToolStarted(call_id=f"t{i}", name="look", attempt=1))
        events.append(ToolResult(call_id=f"t{i}", ok=True, content=i))
    return stamp(events, 0)


def test_folding_a_turn_costs_linear_work_in_its_calls() -> None:
    made = []
    for calls in (SMALL, 10 * SMALL):
        journal = wide_journal(calls)
        with counting() as count:
            state = fold(journal)
        assert not state.turn_open
        assert len(state.messages[-1]["content"]) == calls
        made.append(count[0])
    assert made[1] < LINEAR * made[0], made


class _Span:
    def answered(self, reply: Any, *, seq: int) -> None:
        pass

    def ended(self, outcome: Any, *, seq: int) -> None:
        pass

    def __enter__(self) -> _Span:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


class SeqTelemetry:
    """A ``RunTelemetry`` that keeps the seq each tool attempt says it started as."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}

    def start_run(self, run_id: str) -> AbstractContextManager[dict[str, str] | None]:
        return nullcontext(None)

    def run_context(self, run_id: str) -> dict[str, str] | None:
        return None

    def drive(self, **_: Any) -> SeqTelemetry:
        return self

    def chat(self, **_: Any) -> _Span:
        return _Span()

    def tool(self, *, call_id: str, seq: int, **_: Any) -> _Span:
        self.started[call_id] = seq
        return _Span()

    def end(self, **_: Any) -> None:
        pass


async def wide_run(root: Path, calls: int, telemetry: SeqTelemetry) -> list[Any]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def look(i: int) -> int:
        """Look item ``i`` up."""
        return i

    use = tether.ScriptedModel.tool_use
    model = tether.ScriptedModel([[use(f"t{i}", "look", {"i": i}) for i in range(calls)], "ok"])
    store = tether.FileStore(root, redact=None)
    sup = tether.Supervisor(
        store,
        model=model,
        tools=tools,
        sweep_interval=None,
        telemetry=telemetry,
    )
    async with sup:
        await sup.start("wide", "look everything up")
        assert await sup.wait("wide", timeout=WAIT * 6) is tether.RunStatus.DONE
        return await store.read("wide")


async def test_a_traced_answer_with_many_calls_costs_linear_work(tmp_path: Path) -> None:
    made = []
    for calls in (SMALL, 10 * SMALL):
        telemetry = SeqTelemetry()
        with counting() as count:
            events = await wide_run(tmp_path / str(calls), calls, telemetry)
        made.append(count[0])
        # Each attempt is reported with the seq of its own tool_started record.
        starts = {e.call_id: e.seq for e in events if isinstance(e, ToolStarted)}
        assert telemetry.started == starts
        assert len(starts) == calls
    assert made[1] < LINEAR * made[0], made
