"""The demos' parts on their own: the fake services, the scripts, the timeline."""

from __future__ import annotations

import json
import pathlib

from tether.demo import _kitebase, _mail
from tether.demo._services import HelpDesk, Outbox
from tether.journal import AnyEvent, Decision, ModelResponse, ToolResult, ToolStarted
from tether.models import Message, ToolResultBlock
from tether.testing._timeline import Timeline


def test_help_desk_sends_once_per_key(tmp_path: pathlib.Path) -> None:
    desk = HelpDesk(tmp_path / "helpdesk.db")
    first = desk.send_reply("KITE-1", "Acme", "hello", "run:toolu_1")
    again = desk.send_reply("KITE-1", "Acme", "hello, reworded", "run:toolu_1")
    other = desk.send_reply("KITE-1", "Acme", "a second reply", "run:toolu_2")
    assert (first.id, first.duplicate) == (1, False)
    assert (again.id, again.duplicate) == (1, True)
    assert (other.id, other.duplicate) == (2, False)
    assert desk.count("KITE-1") == 2
    assert desk.count("KITE-2") == 0


def test_help_desk_without_key_sends_every_time(tmp_path: pathlib.Path) -> None:
    desk = HelpDesk(tmp_path / "helpdesk.db")
    ids = [desk.send_reply("KITE-1", "Acme", "hello", None).id for _ in range(3)]
    assert ids == [1, 2, 3]
    assert desk.count() == 3
    assert HelpDesk(tmp_path / "missing.db").count() == 0


def test_outbox_delivers_once_per_key(tmp_path: pathlib.Path) -> None:
    outbox = Outbox(tmp_path / "outbox.jsonl")
    assert outbox.emails() == []
    first = outbox.send("a@example.com", "s", "b", "run:toolu_3")
    again = outbox.send("a@example.com", "s", "b", "run:toolu_3")
    keyless = [outbox.send("a@example.com", "s", "b", None) for _ in range(2)]
    assert (first.id, first.duplicate, again.id, again.duplicate) == (1, False, 1, True)
    assert [d.id for d in keyless] == [2, 3]
    assert [e["idempotency_key"] for e in outbox.emails()] == ["run:toolu_3", None, None]


def _result(content: str, *, is_error: bool = False) -> Message:
    block: ToolResultBlock = {
        "type": "tool_result",
        "tool_use_id": "toolu_03",
        "content": content,
        "is_error": is_error,
    }
    return {"role": "user", "content": [block]}


def test_kitebase_script_follows_the_conversation() -> None:
    prompt: Message = {"role": "user", "content": _kitebase.PROMPT}
    said: Message = {"role": "assistant", "content": [{"type": "text", "text": "..."}]}
    first = _kitebase.script([prompt])
    assert [b.get("name") for b in first] == [None, "get_ticket"]
    third = _kitebase.script([prompt, said, _result("x"), said, _result("y")])
    assert third[0]["id"] == "toolu_03"
    assert third[0]["input"]["message"] == _kitebase.REPLY
    history = [prompt, said, _result("x"), said, _result("y"), said]
    sent = _kitebase.script([*history, _result(json.dumps({"reply_id": 1}))])
    assert "help desk reply #1" in sent
    note = "reply_to_customer was rejected by priya: Loop in their IT admin first."
    refused = _kitebase.script([*history, _result(note, is_error=True)])
    assert refused.startswith("Nothing was sent to Northwind Studio on KITE-142")
    assert note in refused


def test_mail_script_passes_each_result_on() -> None:
    prompt: Message = {"role": "user", "content": _mail.PROMPT}
    said: Message = {"role": "assistant", "content": [{"type": "text", "text": "..."}]}
    notes = json.dumps(_mail.NOTES)
    summarise = _mail.script([prompt, said, _result(notes)])
    assert summarise[0]["name"] == "summarise"
    assert summarise[0]["input"]["text"] == "\n".join(_mail.NOTES)
    send = _mail.script([prompt, said, _result(notes), said, _result("the summary")])
    assert send[0]["name"] == "send_email"
    assert send[0]["input"]["body"] == "the summary"
    history = [prompt, said, _result(notes), said, _result("s"), said, _result("{}")]
    assert _mail.script(history) == "Report summarised and sent."


def test_timeline_describes_events_once() -> None:
    timeline = Timeline()
    tool_use = {"type": "tool_use", "id": "toolu_03", "name": "send", "input": {"to": "x"}}
    events: list[AnyEvent] = [
        ModelResponse(seq=0, message={"role": "assistant", "content": [tool_use]}),
        ToolStarted(seq=1, call_id="toolu_03", name="send"),
        ToolResult(seq=2, call_id="toolu_03", ok=False, content="boom"),
        Decision(seq=3, call_id="toolu_03", approved=False, by="priya", note="no"),
    ]
    lines = timeline.new_lines(events[:2])
    assert lines == [
        '  seq 0   model_response  asks for send(to="x") [toolu_03]',
        "  seq 1   tool_started    send [toolu_03] attempt 1",
    ]
    assert timeline.new_lines(events) == [
        "  seq 2   tool_result     send [toolu_03] error: boom",
        "  seq 3   decision        rejected send [toolu_03] by priya: no",
    ]
