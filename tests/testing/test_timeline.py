"""A child started with ``--timeline`` prints the journal events its process writes, once each,
then the run's status: what ``tether demo`` shows of every process."""

from __future__ import annotations

import pathlib

import pytest

from tether.testing._child import STATUS_MARK, child_main
from tether.testing._drive import Target, spawn
from tether.testing._scenario import resolve_target


def _target() -> Target:
    spec, factory, paths = resolve_target("tests.testing._broken_scenarios:fine")
    return Target(spec, factory, paths, timeline=True, trace=False)


def test_each_event_once_then_the_status_and_what_a_resuming_process_loaded(
    tmp_path: pathlib.Path,
) -> None:
    start = spawn(_target(), tmp_path, 1, "start")
    assert start.returncode == 0, start.stderr
    *lines, mark = start.stdout.splitlines()
    assert lines == [
        '  seq 0   run_started     model scripted, 0 tool(s); prompt: "hi"',
        '  seq 1   model_response  says "done"',
        "  seq 2   run_finished    done",
        "status: done",
    ]
    assert mark.startswith(STATUS_MARK)
    assert start.model_calls == 1
    assert start.points == []  # not traced

    resume = spawn(_target(), tmp_path, 2, "resume")
    assert resume.returncode == 0, resume.stderr
    assert resume.stdout.splitlines()[:-1] == [
        "loaded the journal: seq 0-2, last event: run_finished done",
        "status: done",
    ]
    assert resume.model_calls == 0


def test_a_timeline_needs_a_file_store(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tests.testing._broken_scenarios:fine", "--root", str(tmp_path), "--step", "start"]
    with pytest.raises(SystemExit) as exc:
        child_main([*argv, "--timeline", "--store", "postgresql://nobody@127.0.0.1:1/x"])
    assert exc.value.code == 2
    assert "--timeline reads the run's journal file" in capsys.readouterr().err
