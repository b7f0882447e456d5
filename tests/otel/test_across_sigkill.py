"""One trace per run across a real ``SIGKILL`` and a resume, and nothing reported twice.

A child process starts the run with tracing (its spans written to a file as each ends) and is
killed with ``SIGKILL`` inside ``send_reply``, after the reply went out and before its result
was saved. This process resumes the run with the SDK's in-memory exporter. Together the two
must tell what really happened: three model calls (two in the child, one here: no ``chat``
span for the answers the journal replays), ``lookup`` run once, ``send_reply`` twice (the
second a new attempt that says the first dangled), all in the trace the run's start journaled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import tether
from tether.journal import ModelResponse
from tether.supervisor import RunStatus, Supervisor

from ..supervisor._helpers import of_type, read_events
from ._agent import RUN, app, replies
from .conftest import Exported

REPO = Path(__file__).resolve().parents[2]


def killed_child(store: Path, desk: Path, spans: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_CRASH_AT": "tool_returned:2"}  # send_reply has returned
    argv = [sys.executable, "-m", "tests.otel._traced_child", str(store), str(desk), str(spans)]
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def hex_id(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


async def test_a_resumed_run_reports_only_what_it_did_again_in_the_same_trace(
    tmp_path: Path, exported: Exported
) -> None:
    store, desk, spans_file = tmp_path / "store", tmp_path / "desk.jsonl", tmp_path / "spans"
    proc = killed_child(store, desk, spans_file)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    before: list[dict[str, Any]] = [json.loads(x) for x in spans_file.read_text().splitlines()]

    # What the killed process exported: the spans that ended before the kill.
    assert [s["name"] for s in before] == [
        "start_run",
        "chat scripted-claude",
        "execute_tool lookup",
        "chat scripted-claude",
    ]  # not its invoke_agent, nor the send_reply attempt it died in: they never ended
    root = before[0]
    trace_id = root["context"]["trace_id"]
    assert {s["context"]["trace_id"] for s in before} == {trace_id}
    assert [s["attributes"]["gen_ai.response.id"] for s in before[1::2]] == ["msg_1", "msg_2"]

    model, tools = app(desk)
    telemetry = exported.telemetry(agent_name="helpdesk", capture_content=True)
    async with Supervisor(
        tether.FileStore(store), model=model, tools=tools, telemetry=telemetry
    ) as sup:
        assert await sup.wait(RUN, timeout=30) is RunStatus.DONE

    after = exported.spans()
    assert [s.name for s in after] == [
        "execute_tool send_reply",
        "chat scripted-claude",
        "invoke_agent helpdesk",
    ]  # no start_run (the run exists), no chat for msg_1 or msg_2, no lookup: all journaled
    reply, chat, drive = after

    # One trace: the resumed drive is a child of the start_run span the child journaled.
    assert hex_id(drive.context.trace_id, 32) == trace_id
    assert drive.parent is not None
    assert drive.parent.is_remote
    assert hex_id(drive.parent.span_id, 16) == root["context"]["span_id"]
    assert reply.parent is not None
    assert reply.parent.span_id == drive.context.span_id
    assert chat.parent is not None
    assert chat.parent.span_id == drive.context.span_id

    assert dict(drive.attributes or {})["tether.restarts"] == 1
    assert dict(drive.attributes or {})["tether.resume.cause"] == "crash"
    reply_attrs = dict(reply.attributes or {})
    assert reply_attrs["gen_ai.tool.call.id"] == "toolu_2"
    assert reply_attrs["tether.attempt"] == 2
    assert reply_attrs["tether.dangling"] is True
    assert reply_attrs["tether.replay_policy"] == "idempotency_key"
    assert reply_attrs["tether.outcome"] == "result"
    assert dict(chat.attributes or {})["gen_ai.response.id"] == "msg_3"

    # The counts agree with the journal: one chat span per model call made, across both.
    events = await read_events(store, RUN)
    answers = of_type(events, ModelResponse)
    chats = [s for s in before if s["name"].startswith("chat")] + exported.named("chat")
    assert len(chats) == len(answers) == 3
    assert len(replies(desk)) == 1  # the desk deduplicated the second attempt by its key
    values = [str(v) for s in after for v in dict(s.attributes or {}).values()]
    values += [str(v) for s in before for v in s["attributes"].values()]
    assert not [v for v in values if f"{RUN}:toolu_2" in v]
