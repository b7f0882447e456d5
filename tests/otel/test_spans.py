"""Spans and metrics of one run in one process: the tree, the GenAI attributes, tether's own,
the metrics, and content capture (off unless asked for, never an idempotency key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import tether
from tether.journal import RunStarted
from tether.otel import CAPTURE_CONTENT_ENV, OpenTelemetry
from tether.supervisor import RunStatus, Supervisor

from ..supervisor._helpers import read_events
from ._agent import RUN, app, replies
from .conftest import Exported


async def traced_run(tmp_path: Path, telemetry: OpenTelemetry | None) -> None:
    model, tools = app(tmp_path / "desk.jsonl")
    store = tether.FileStore(tmp_path / "store")
    async with Supervisor(store, model=model, tools=tools, telemetry=telemetry) as sup:
        await sup.start(RUN, "Help with K-1.", system="You are the help desk.")
        assert await sup.wait(RUN, timeout=30) is RunStatus.DONE


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_is_one_tree_of_genai_spans(tmp_path: Path, exported: Exported) -> None:
    await traced_run(tmp_path, exported.telemetry(agent_name="helpdesk", provider_name="acme"))
    spans = exported.spans()
    assert [s.name for s in spans] == [
        "start_run",
        "chat scripted-claude",
        "execute_tool lookup",
        "chat scripted-claude",
        "execute_tool send_reply",
        "chat scripted-claude",
        "invoke_agent helpdesk",
    ]
    (root,) = exported.named("start_run")
    (drive,) = exported.named("invoke_agent")
    assert root.parent is None
    assert drive.parent is not None
    assert drive.parent.span_id == root.context.span_id
    for span in spans[1:-1]:
        assert span.parent is not None
        assert span.parent.span_id == drive.context.span_id
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}

    assert attrs(drive) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "helpdesk",
        "gen_ai.conversation.id": RUN,
        "gen_ai.request.model": "scripted-claude",
        "tether.run.id": RUN,
        "tether.restarts": 0,
        "tether.status": "done",
    }
    chats = exported.named("chat")
    assert all(c.kind is SpanKind.CLIENT for c in chats)
    assert attrs(chats[0]) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "scripted-claude",
        "gen_ai.provider.name": "acme",
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.finish_reasons": ("tool_use",),
        "gen_ai.usage.input_tokens": 130,  # cache reads and writes included
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 20,
        "tether.run.id": RUN,
        "tether.seq": 1,
    }
    assert attrs(chats[2])["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert [attrs(c)["gen_ai.response.id"] for c in chats] == ["msg_1", "msg_2", "msg_3"]

    reply = exported.named("execute_tool send_reply")[0]
    assert attrs(reply) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "send_reply",
        "gen_ai.tool.call.id": "toolu_2",
        "gen_ai.tool.type": "function",
        "tether.run.id": RUN,
        "tether.seq": 5,  # its tool_started, written with the answer (seq 4)'s group
        "tether.attempt": 1,
        "tether.replay_policy": "idempotency_key",
        "tether.dangling": False,
        "tether.result_seq": 6,
        "tether.outcome": "result",
    }
    events = await read_events(tmp_path / "store", RUN)
    assert [type(events[i]).__name__ for i in (1, 4, 5, 6)] == [
        "ModelResponse",
        "ModelResponse",
        "ToolStarted",
        "ToolResult",
    ]
    (started,) = [e for e in events if isinstance(e, RunStarted)]
    assert started.trace is not None
    assert (
        f"{root.context.trace_id:032x}-{root.context.span_id:016x}" in started.trace["traceparent"]
    )


async def test_metrics_count_tokens_and_durations_per_model_call(
    tmp_path: Path, exported: Exported
) -> None:
    await traced_run(tmp_path, exported.telemetry())
    data = exported.metrics_out.get_metrics_data()
    assert data is not None
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    by_type = {}
    for p in tokens.data.data_points:
        assert isinstance(p, HistogramDataPoint)
        by_type[str(dict(p.attributes or {})["gen_ai.token.type"])] = p
    assert (by_type["input"].count, by_type["input"].sum) == (3, 390)
    assert (by_type["output"].count, by_type["output"].sum) == (3, 15)
    assert dict(by_type["input"].attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "scripted-claude",
        "gen_ai.token.type": "input",
    }
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    (point,) = duration.data.data_points
    assert isinstance(point, HistogramDataPoint)
    assert point.count == 3


CONTENT = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


async def test_content_is_not_recorded_by_default(
    tmp_path: Path, exported: Exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    await traced_run(tmp_path, exported.telemetry())
    recorded = {key for span in exported.spans() for key in attrs(span)}
    assert recorded & CONTENT == set()
    assert "Fixed." not in str([attrs(s) for s in exported.spans()])


@pytest.mark.parametrize("switch", ["argument", "environment"])
async def test_content_capture_is_switched_on_and_never_records_a_key(
    tmp_path: Path, exported: Exported, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    if switch == "argument":
        telemetry = exported.telemetry(capture_content=True)
    else:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
        telemetry = exported.telemetry()
    assert telemetry.capture_content
    await traced_run(tmp_path, telemetry)
    chats = exported.named("chat")
    first = attrs(chats[0])
    assert (
        first["gen_ai.system_instructions"]
        == '[{"type":"text","content":"You are the help desk."}]'
    )
    assert (
        first["gen_ai.input.messages"]
        == '[{"role":"user","parts":[{"type":"text","content":"Help with K-1."}]}]'
    )
    assert '"type":"tool_call","id":"toolu_1","name":"lookup"' in first["gen_ai.output.messages"]
    (reply,) = exported.named("execute_tool send_reply")
    assert attrs(reply)["gen_ai.tool.call.arguments"] == '{"ticket":"K-1","text":"Fixed."}'
    assert attrs(reply)["gen_ai.tool.call.result"] == "sent"
    # The key reached the tool (the desk has it), and no attribute anywhere holds it.
    key = f"{RUN}:toolu_2"
    assert [r["key"] for r in replies(tmp_path / "desk.jsonl")] == [key]
    values = [str(v) for span in exported.spans() for v in attrs(span).values()]
    assert not [v for v in values if key in v]


async def test_an_untraced_supervisor_journals_no_trace(tmp_path: Path) -> None:
    await traced_run(tmp_path, None)
    events = await read_events(tmp_path / "store", RUN)
    assert isinstance(events[0], RunStarted)
    assert events[0].trace is None


async def test_a_failed_model_call_is_an_error_span(tmp_path: Path, exported: Exported) -> None:
    class Refusing:
        name = "scripted-claude"
        params: ClassVar[dict[str, Any]] = {}

        async def __call__(self, **_: Any) -> Any:
            raise tether.ModelError(self.name, "bad request", transient=False)

    store = tether.FileStore(tmp_path / "store")
    async with Supervisor(store, model=Refusing(), telemetry=exported.telemetry()) as sup:
        await sup.start(RUN, "hi")
        assert await sup.wait(RUN, timeout=30) is RunStatus.NEEDS_ATTENTION
    (chat,) = exported.named("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "ModelError"
    assert attrs(chat)["tether.model.transient"] is False
    (drive,) = exported.named("invoke_agent")
    assert attrs(drive)["tether.status"] == "needs_attention"


async def test_a_refused_start_reports_no_span(tmp_path: Path, exported: Exported) -> None:
    """A worker that starts its runs idempotently is refused for a run that exists: no span
    for that, no trace of its own. Only the start that created the run is reported."""
    model, tools = app(tmp_path / "desk.jsonl")
    store = tether.FileStore(tmp_path / "store")
    async with Supervisor(store, model=model, tools=tools, telemetry=exported.telemetry()) as sup:
        await sup.start(RUN, "Help with K-1.")
        assert await sup.wait(RUN, timeout=30) is RunStatus.DONE
        reported = exported.spans()
        for _ in range(3):
            with pytest.raises(tether.RunExistsError):
                await sup.start(RUN, "Help with K-1.")
        with pytest.raises(tether.InvalidRunIdError):
            await sup.start("../not-a-run", "Help.")
    assert exported.spans() == reported
    (root,) = exported.named("start_run")
    assert {s.context.trace_id for s in reported} == {root.context.trace_id}
    (started,) = [
        e for e in await read_events(tmp_path / "store", RUN) if isinstance(e, RunStarted)
    ]
    assert started.trace is not None
    assert f"{root.context.span_id:016x}" in started.trace["traceparent"]
