"""``tether bench``: the real command end to end on a tiny window, its report and its errors."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tether.bench import build_cases, build_ratios
from tether.cli import main
from tether.cli._progress import CaseProgress

ONE_OF_EACH = "*/1KiB/g1/w1"  # every system, 1 KiB records, one writer
KINDS = {"tether", "tether-threads", "plain", "aiofiles", "sqlite", "handoff"}
TINY = ("--seconds", "0.05")


def bench(*argv: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "bench", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_json_report_of_every_system_with_ratios_and_the_machine(tmp_path: pathlib.Path) -> None:
    argv = ("--quick", "--json", "--dir", str(tmp_path), *TINY, "--cases", ONE_OF_EACH)
    proc = bench(*argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)  # one object, nothing else on stdout
    assert set(report) == {"machine", "settings", "results", "ratios"}

    results = {r["key"]: r for r in report["results"]}
    assert {key.split("/")[0] for key in results} == KINDS
    assert all(key.endswith("/1KiB/g1/w1") for key in results)
    for r in results.values():
        assert r["records_per_s"] > 0, r
        assert len(r["rates"]) == 2  # --quick: two repeats
        assert r["mb_per_s"] == pytest.approx(r["records_per_s"] * 1024 / 1e6, rel=1e-2)

    ratios = {q["name"]: q for q in report["ratios"]}
    wanted = {
        q.name for q in build_ratios() if {q.numerator.key, q.denominator.key} <= set(results)
    }
    assert set(ratios) == wanted
    assert "ceiling: bare thread hand-off vs plain sync loop" in ratios
    for q in ratios.values():
        assert q["value"] > 0
        assert q["paired_median"] > 0
        assert {q["numerator"], q["denominator"]} <= set(results)
        assert (q["met"] is None) == (q["target"] is None)
    target = ratios["1 journal, 1 KiB, async vs plain sync loop"]
    assert target["target"] == 1.0
    assert target["met"] == (target["value"] >= 1.0)

    machine = report["machine"]
    for key in ("date", "cpu_count", "platform", "python", "device", "mount_point", "sqlite"):
        assert machine[key], key
    assert machine["filesystem"] not in ("", "?")
    assert pathlib.Path(machine["bench_dir"]).parent == tmp_path
    assert report["settings"] == {
        "quick": True,
        "duration_s": 0.05,
        "warmup_s": pytest.approx(0.05 / 3),
        "repeats": 2,
        "cases": [ONE_OF_EACH],
        "elapsed_s": report["settings"]["elapsed_s"],
    }

    # Off a terminal, progress is one plain line per measurement, on stderr.
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("  [")]
    assert len(lines) == 12
    assert lines[0].startswith("  [1/12] tether/1KiB/g1/w1 (repeat 1/2): ")
    assert lines[-1].startswith("  [12/12] tether/1KiB/g1/w1 (repeat 2/2): ")
    assert lines[0].endswith(" records/s")
    assert "\x1b[" not in proc.stderr  # no terminal control codes in a log
    assert list(tmp_path.iterdir()) == []  # the cases' directories are gone


def test_tables_and_out_file(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results" / "journal.json"
    cases = "tether/1KiB/g1/w1,plain/1KiB/g1/w1"
    argv = ["bench", "--dir", str(tmp_path), *TINY, "--repeats", "1", "--cases", cases]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "tether/1KiB/g1/w1" in printed.out
    assert "plain/1KiB/g1/w1" in printed.out
    assert "1 journal, 1 KiB, async vs plain sync loop" in printed.out
    assert "filesystem " in printed.out.splitlines()[-1]
    assert "2 measurements (2 cases x 1)" in printed.err
    saved = json.loads(out.read_text())
    assert [r["key"] for r in saved["results"]] == ["tether/1KiB/g1/w1", "plain/1KiB/g1/w1"]
    assert [q["name"] for q in saved["ratios"]] == ["1 journal, 1 KiB, async vs plain sync loop"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_a_dir_that_is_a_file_exits_3(tmp_path: pathlib.Path) -> None:
    afile = tmp_path / "journal.log"
    afile.write_text("not a directory")
    proc = bench("--dir", str(afile), *TINY, cwd=tmp_path)
    assert proc.returncode == 3
    assert f"tether: bench: --dir {afile} is not a directory" in proc.stderr
    assert proc.stdout == ""


def test_a_missing_dir_exits_3(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--dir", str(tmp_path / "nowhere")]) == 3
    assert f"--dir {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_a_pattern_matching_no_case_exits_2_naming_the_cases(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--dir", str(tmp_path), "--cases", "tether/1KiB/g1/w1,tether/1MiB"]) == 2
    err = capsys.readouterr().err
    assert "no case matches 'tether/1MiB'" in err
    assert all(c.key in err for c in build_cases())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", [("--seconds", "0"), ("--repeats", "-1"), ("--seconds", "x")])
def test_a_window_that_is_not_positive_is_a_usage_error(
    option: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", *option])
    assert exited.value.code == 2
    assert f"argument {option[0]}" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_live_line_that_goes_away() -> None:
    screen = _Terminal()
    with CaseProgress(screen) as progress:
        progress.started(0, 2, "plain/1KiB/g1/w1")
        progress.finished(1, 2, "plain/1KiB/g1/w1: 6,000 records/s")
        progress.started(1, 2, "tether/1KiB/g1/w1")
    shown = screen.getvalue()
    assert "1/2" in shown
    assert "tether/1KiB/g1/w1" in shown
    assert "  [1/2]" not in shown  # no plain lines on a terminal
