"""The demos end to end, as ``tether demo`` runs them: real child processes, a real SIGKILL."""

from __future__ import annotations

import json
import pathlib
import sqlite3
import subprocess
import sys
import tempfile
from typing import Any

import pytest

from tether.cli import main
from tether.demo import DemoError, run_kitebase


def _json_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["demo", *argv, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out  # --json prints one object and nothing else
    summary: dict[str, Any] = json.loads(out[0])
    return code, summary


def _replies_in_db(root: pathlib.Path) -> list[tuple[int, str | None]]:
    db = sqlite3.connect(root / "helpdesk.db")
    try:
        rows = db.execute("SELECT id, idempotency_key FROM replies ORDER BY id").fetchall()
    finally:
        db.close()
    return [(int(i), k) for i, k in rows]


def test_kitebase_sends_one_reply_in_four_model_calls(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "kite"
    assert main(["demo", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1] == "replies: 1  model calls: 4"
    assert "Replies Northwind Studio got on KITE-142: 1" in lines
    assert "Model calls across all three processes: 4" in lines
    # Process 1 parks, priya approves, process 2 sends and dies, process 3 finishes.
    assert "status: waiting_for_approval (approval needed for reply_to_customer (toolu_03))" in out
    assert "approved reply_to_customer [toolu_03] by priya" in out
    assert "help desk: sent reply #1 to Northwind Studio (key run-kite-142:toolu_03)" in out
    assert "CRASH: SIGKILL (exit code -9) right after reply_to_customer returned" in out
    assert "key run-kite-142:toolu_03 seen before, returned reply #1, sent nothing" in out
    assert out.index("sent reply #1") < out.index("CRASH: SIGKILL") < out.index("seen before")
    assert _replies_in_db(root) == [(1, "run-kite-142:toolu_03")]
    size = (root / "runs" / "run-kite-142.journal").stat().st_size
    assert f"journal: 15 events, {size} bytes (run-kite-142.journal)" in lines


@pytest.mark.slow
def test_kitebase_json_summary_and_temporary_root_removed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    code, summary = _json_run(capsys, "kitebase")
    assert code == 0
    assert summary["replies"] == 1
    assert summary["model_calls"] == 4
    assert summary["recorded_model_calls"] == 4
    assert summary["status"] == "done"
    assert summary["processes"] == [0, -9, 0]
    assert summary["journal_bytes"] > 0
    assert summary["decision"] == "approved"
    assert summary["ok"] is True
    assert list(temp.iterdir()) == []  # the default root is a temporary directory, removed


@pytest.mark.slow
def test_kitebase_without_idempotency_key_replies_twice(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "kite"
    code, summary = _json_run(capsys, "--root", str(root), "--no-idempotency-key")
    assert code == 0  # two replies is what this mode is designed to show
    assert summary["replies"] == 2
    assert summary["model_calls"] == 4  # the model is still not asked again
    assert summary["processes"] == [0, -9, 0]
    assert _replies_in_db(root) == [(1, None), (2, None)]


def test_kitebase_rejected_sends_nothing_and_says_why(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = run_kitebase(tmp_path / "kite", reject=True)
    out = capsys.readouterr().out
    assert summary.ok
    assert summary.effects == 0
    assert summary.model_calls == 4
    assert summary.processes == [0, 0]  # nothing is sent, so there is no send to be killed after
    assert summary.final_text is not None
    assert "Loop in their IT admin first." in summary.final_text
    assert "rejected reply_to_customer [toolu_03] by priya: Loop in their IT admin first." in out
    assert out.strip().splitlines()[-1] == "replies: 0  model calls: 4"


def test_mail_sends_one_email_in_four_model_calls(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "mail"
    assert main(["demo", "mail", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "emails: 1  model calls: 4"
    # The third tool to return, where process 1 dies, is send_email.
    assert "(armed: TETHER_CRASH_AT=tool_returned:3)" in out
    assert "CRASH: SIGKILL (exit code -9) right after send_email returned" in out
    assert "process 1 made 3 model calls" in out
    assert "mail: delivered email #1 to dana@example.com (key run-q3-report:toolu_03)" in out
    assert "mail: key run-q3-report:toolu_03 seen before, returned email #1" in out
    emails = [json.loads(line) for line in (root / "outbox.jsonl").read_text().splitlines()]
    assert [e["idempotency_key"] for e in emails] == ["run-q3-report:toolu_03"]


def test_mail_without_idempotency_key_sends_twice(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary = _json_run(capsys, "mail", "--root", str(tmp_path / "m"), "--no-idempotency-key")
    assert code == 0
    assert summary["emails"] == 2
    assert summary["model_calls"] == 4
    assert summary["processes"] == [-9, 0]
    assert summary["status"] == "done"


def test_reject_is_for_kitebase_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "mail", "--reject"])
    assert exc.value.code == 2
    assert "--reject applies to the kitebase demo only" in capsys.readouterr().err


def test_a_root_that_is_not_empty_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "something").write_text("x")
    assert main(["demo", "--root", str(tmp_path), "--json"]) == 2  # usage, like crashtest's
    err = capsys.readouterr().err
    assert "is not empty" in err
    assert "kept" not in err
    assert main(["demo", "--root", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing says the store was kept
    with pytest.raises(DemoError):
        run_kitebase(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]


def test_child_processes_do_not_import_anthropic(tmp_path: pathlib.Path) -> None:
    cmd = [sys.executable, "-X", "importtime", "-m", "tether.demo", "mail", "start"]
    proc = subprocess.run(
        [*cmd, "--root", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "tether.supervisor" in imported
    assert not [m for m in imported if m.split(".")[0] in ("anthropic", "httpx")]
    assert "status: done" in proc.stdout


def test_a_root_that_is_a_file_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    assert main(["demo", "--root", str(tmp_path / "a-file"), "--json"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert (tmp_path / "a-file").read_text() == "x"
