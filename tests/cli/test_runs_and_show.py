"""``tether runs`` and ``tether show``: status, counters and timelines from the journals."""

from __future__ import annotations

import json
import pathlib

import pytest

from tether.cli import build_parser
from tether.cli._view import fail
from tether.journal import FileStore

from ._stores import APPROVE, CHARGE_CALL, DONE, ESCALATED, FAILED, REFUND_CALL, Env, cli, cli_async


def test_runs_table(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "runs", "--root", env.r)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "RUN", "STATUS", "AGE", "MODEL", "TOOLS", "RESTARTS", "WAITING", "/", "REASON"
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {APPROVE, ESCALATED, DONE, FAILED}
    assert rows[APPROVE].split()[1:6] == ["waiting_for_approval", "0s", "1", "0", "0"]
    assert f"awaiting approval: {REFUND_CALL} issue_refund" in rows[APPROVE]
    assert rows[ESCALATED].split()[1] == "needs_attention"
    assert rows[ESCALATED].split()[3:6] == ["1", "1", "1"]  # model, tools, restarts
    assert f"awaiting resolution: {CHARGE_CALL} charge_card (outcome unknown" in rows[ESCALATED]
    assert rows[DONE].split()[1:6] == ["done", "0s", "2", "1", "0"]
    assert "model call budget exhausted: 1 of 1" in rows[FAILED]
    # Columns line up: every status starts where the header's does.
    at = lines[0].index("STATUS")
    assert all(line[at - 2 : at] == "  " and line[at] != " " for line in lines[1:])


def test_runs_json_and_status_filter(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "runs", "--root", env.r, "--json")
    assert code == 0
    runs = {r["run_id"]: r for r in json.loads(out)}
    assert runs[APPROVE]["status"] == "waiting_for_approval"
    assert runs[APPROVE]["waiting"] == [
        {
            "call_id": REFUND_CALL,
            "tool": "issue_refund",
            "awaiting": "approval",
            "since": runs[APPROVE]["waiting"][0]["since"],
            "reason": "",
        }
    ]
    esc = runs[ESCALATED]
    assert esc["status"] == "needs_attention"
    assert [(w["call_id"], w["awaiting"]) for w in esc["waiting"]] == [(CHARGE_CALL, "resolution")]
    assert "outcome unknown" in esc["reason"]
    assert esc["restarts"] == 1
    assert runs[DONE]["final_text"] == "all done"
    assert runs[DONE]["model_calls"] == 2
    assert runs[DONE]["tool_calls"] == 1
    assert runs[DONE]["finished_at"] >= runs[DONE]["started_at"] > 0
    assert runs[FAILED]["reason"] == "model call budget exhausted: 1 of 1"
    assert all(r["held_by"] is None and r["age_s"] >= 0 for r in runs.values())

    code, out, _ = cli(
        capsys, "runs", "--root", env.r, "--json", "--status", "done", "--status", "failed"
    )
    assert code == 0
    assert sorted(r["run_id"] for r in json.loads(out)) == [DONE, FAILED]
    code, out, _ = cli(capsys, "runs", "--root", env.r, "--status", "cancelled")
    assert (code, out) == (0, "no runs with that status\n")


async def test_runs_shows_a_held_journal_as_running(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    from ._stores import cli_async

    async with FileStore(env.root) as store:
        journal = await store.open(APPROVE)
        async with journal:
            code, out, _ = await cli_async(capsys, "runs", "--root", env.r, "--json")
    assert code == 0
    run = next(r for r in json.loads(out) if r["run_id"] == APPROVE)
    assert run["status"] == "running"
    assert run["held_by"] is not None


def test_runs_on_an_unreadable_journal_and_a_missing_root(
    env: Env, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = env.root / "runs" / f"{DONE}.journal"
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF  # inside an early group; later groups are intact: corruption
    path.write_bytes(bytes(data))
    code, out, _ = cli(capsys, "runs", "--root", env.r, "--json")
    assert code == 0
    run = next(r for r in json.loads(out) if r["run_id"] == DONE)
    assert run["status"] == "needs_attention"
    assert run["readable"] is False
    assert "journal cannot be read" in run["reason"]

    code, _, err = cli(capsys, "show", "--root", env.r, DONE)
    assert code == 1
    assert "corrupt" in err
    assert "tether journal verify" in err

    code, _, err = cli(capsys, "runs", "--root", str(tmp_path / "nowhere"))
    assert code == 3
    assert "no such directory" in err
    assert not (tmp_path / "nowhere").exists()

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for argv in (("runs",), ("gc",), ("show", DONE), ("approve", APPROVE, "toolu_x", "--by", "p")):
        code, _, err = cli(capsys, argv[0], "--root", str(a_file), *argv[1:])
        assert code == 3, argv
        assert f"{a_file}: not a directory (give the store's --root)" in err, argv
    assert a_file.read_text() == "x"


def test_show_timeline(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", "--root", env.r, DONE)
    assert code == 0
    assert out.startswith(f"run {DONE}: done\n")
    assert "model calls 2, tool calls 1, restarts 0" in out
    assert "final text: all done" in out
    timeline = out.split("\n\n", 1)[1].splitlines()
    assert timeline[0].split() == ["SEQ", "TIME", "TYPE", "WHAT"]
    kinds = [line.split()[3] for line in timeline[1:]]
    assert kinds == [
        "run_started", "model_response", "tool_started", "tool_result", "model_response",
        "run_finished",
    ]  # fmt: skip
    assert 'prompt: "look big"' in timeline[1]
    assert 'asks for lookup(q="big") [toolu_l1]' in timeline[2]
    assert "lookup [toolu_l1] attempt 1" in timeline[3]
    assert "lookup [toolu_l1] ok: blob 303 bytes: xxx" in timeline[4]
    assert timeline[4].endswith("…")
    assert len(timeline[4]) < 160
    assert 'says "all done"' in timeline[5]


def test_show_escalated_and_waiting_runs(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", "--root", env.r, ESCALATED)
    assert code == 0
    assert f"awaiting resolution: {CHARGE_CALL} charge_card" in out
    assert f"tether resolve --root {env.r} {ESCALATED} {CHARGE_CALL}" in out
    assert "resumed" in out
    assert "restart 1 on " in out
    assert "(pid " in out
    assert f"charge_card [{CHARGE_CALL}]: outcome unknown" in out

    code, out, _ = cli(capsys, "show", "--root", env.r, APPROVE)
    assert code == 0
    assert out.startswith(f"run {APPROVE}: waiting_for_approval (awaiting approval: ")
    assert f"tether approve|reject --root {env.r} {APPROVE} {REFUND_CALL} --by NAME" in out


def test_show_json(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "show", "--root", env.r, FAILED, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["summary"]["status"] == "failed"
    assert [e["seq"] for e in data["events"]] == [0, 1, 2, 3, 4]
    assert data["events"][-1]["type"] == "run_finished"
    assert data["events"][-1]["text"] == "failed: model call budget exhausted: 1 of 1"
    assert data["events"][3]["content"] == "small"


def test_show_unknown_and_invalid_runs(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "show", "--root", env.r, "run-nope")
    assert code == 1
    assert "no run 'run-nope'" in err
    code, _, err = cli(capsys, "show", "--root", env.r, "../etc")
    assert code == 2
    assert "invalid run id" in err


@pytest.mark.parametrize(
    "command", ["runs", "show", "approve", "reject", "resolve", "cancel", "gc"]
)
def test_help_is_complete(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--root DIR" in out
    assert "Exit" in out or "exit" in out


async def _waiting_run(env: Env) -> None:
    """A run whose call waits for the event ``payment.o-9`` (until a time), and one asleep."""
    from tether.journal import Manifest, ModelResponse, RunStarted, ToolStarted, Waiting

    for run_id, wait in (
        ("run-event", Waiting(call_id="c1", attempt=1, event="payment.o-9", until=4e9)),
        ("run-sleep", Waiting(call_id="c1", attempt=1, until=4e9)),
    ):
        use = {"type": "tool_use", "id": "c1", "name": "wait_paid", "input": {}}
        await env.craft(
            run_id,
            [
                RunStarted(
                    run_id=run_id,
                    manifest=Manifest(model="scripted"),
                    messages=[{"role": "user", "content": "wait"}],
                ),
                ModelResponse(message={"role": "assistant", "content": [use]}),
                ToolStarted(call_id="c1", name="wait_paid"),
                wait,
            ],
        )


async def test_runs_json_and_show_say_what_a_resting_run_waits_for(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    await _waiting_run(env)
    code, out, _ = await cli_async(capsys, "runs", "--root", env.r, "--json")
    assert code == 0
    runs = {r["run_id"]: r for r in json.loads(out)}
    (event,) = runs["run-event"]["waiting"]
    assert (event["awaiting"], event["event"], event["call_id"]) == ("event", "payment.o-9", "c1")
    assert event["until"] == 4e9
    assert event["what"].startswith("waiting for event payment.o-9 (until ")
    (sleep,) = runs["run-sleep"]["waiting"]
    assert (sleep["awaiting"], sleep["event"], sleep["until"]) == ("time", None, 4e9)
    code, out, _ = await cli_async(capsys, "show", "--root", env.r, "run-event")
    assert code == 0
    assert (
        f"waiting for event payment.o-9 (until 2096-10-02 07:06:40 UTC): c1 wait_paid  ->  "
        f"tether signal --root {env.r} run-event payment.o-9 --data JSON --id ID"
    ) in out


def test_escape_sequences_in_what_a_run_says_never_reach_the_terminal(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reason, a note or a model's words may hold escape sequences (from a console user,
    a model, a tool): printed, they are written out, so none retitles, recolours or rewrites
    the operator's terminal."""
    evil = "esc\x1b]0;pwned\x07\x1b[31mRED\x1b[0m\rOVER"
    code, _, err = cli(capsys, "cancel", "--root", env.r, APPROVE, "--reason", evil, "--by", "o")
    assert code == 0, err
    for argv in (("runs",), ("show", APPROVE)):
        code, out, _ = cli(capsys, *argv, "--root", env.r)
        assert code == 0
        assert "\x1b" not in out
        assert "\r" not in out
        assert "\x07" not in out
        assert "esc\\x1b]0;pwned\\x07\\x1b[31mRED\\x1b[0m" in out  # (\\r: a space)
    # So are bidirectional controls, which would reorder what the operator reads.
    assert fail("refused: by \u202eRED\u202c \u2067x\u2069", 1) == 1
    err = capsys.readouterr().err
    assert "\u202e" not in err
    assert "by \\u202eRED\\u202c \\u2067x\\u2069" in err
    # A refusal may quote what another person gave ("already rejected by NAME"): written out.
    assert fail(f"refused: call was already rejected by {evil}", 1) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "rejected by esc\\x1b]0;pwned" in err
