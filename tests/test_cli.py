"""The ``tether journal`` commands, run in-process and once as a real console script."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tether.cli import main
from tether.journal import FileStore, Manifest, RunStarted, ToolResult, ToolStarted


async def _make_journal(root: pathlib.Path, groups: int = 5) -> str:
    async with FileStore(root) as store:
        journal = await store.create(
            "run-cli",
            [RunStarted(run_id="run-cli", manifest=Manifest(model="m"), messages=[])],
        )
        for i in range(groups):
            await journal.append(
                [ToolStarted(call_id=f"c{i}"), ToolResult(call_id=f"c{i}", ok=True, content=i)]
            )
        await journal.aclose()
        return store.location("run-cli")


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))


async def test_verify_sound_journal(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _make_journal(store_root)
    assert main(["journal", "verify", path]) == 0
    out = capsys.readouterr().out
    assert "ok:" in out
    assert "11 records in 6 groups" in out
    assert "last seq 10" in out


async def test_verify_reports_corruption_with_offset(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _make_journal(store_root)
    _flip(path, 256 + 20)  # inside the first group's payload; later groups are intact
    assert main(["journal", "verify", path]) == 1
    err = capsys.readouterr().err
    assert "corrupt at offset 256" in err
    assert "checksum mismatch" in err


async def test_verify_reports_torn_tail_without_failing(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _make_journal(store_root)
    size = os.path.getsize(path)
    os.truncate(path, size - 5)
    assert main(["journal", "verify", path]) == 0
    out = capsys.readouterr().out
    assert "torn tail" in out
    assert "9 records" in out


async def test_dump_prints_json_lines(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _make_journal(store_root, groups=2)
    assert main(["journal", "dump", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == [0, 1, 2, 3, 4]
    assert [e["type"] for e in events] == [
        "run_started",
        "tool_started",
        "tool_result",
        "tool_started",
        "tool_result",
    ]


async def test_repair_refuses_without_yes_then_repairs(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = await _make_journal(store_root)
    _flip(path, 256 + 20)
    before = pathlib.Path(path).read_bytes()
    assert main(["journal", "repair", path]) == 1
    assert "refusing" in capsys.readouterr().err
    assert pathlib.Path(path).read_bytes() == before

    assert main(["journal", "repair", path, "--yes"]) == 0
    assert pathlib.Path(path + ".broken").read_bytes() == before[256:]
    assert pathlib.Path(path).read_bytes() == before[:256]
    capsys.readouterr()
    assert main(["journal", "verify", path]) == 0
    assert "0 records" in capsys.readouterr().out


async def test_zeros_after_the_last_record_are_said_and_are_nothing_to_repair(
    store_root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Space kept for appends (or a last group that never reached the disk): verify says how
    much, and repair without --yes is no failure (exit 0), as there is nothing to keep."""
    path = await _make_journal(store_root)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    assert main(["journal", "verify", path]) == 0
    assert f"{size} bytes, last seq" in (out := capsys.readouterr().out)
    assert "then 4096 bytes of zeros (space kept for appends" in out
    assert main(["journal", "repair", path]) == 0
    assert "records; then 4096 bytes of zeros, space kept" in capsys.readouterr().out
    assert os.path.getsize(path) == size + 4096
    assert main(["journal", "repair", path, "--yes"]) == 0
    assert os.path.getsize(path) == size


async def test_repair_through_a_link_keeps_the_cut_bytes_beside_the_journal(
    store_root: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where gc finds them with their run, not beside the link a person named."""
    path = await _make_journal(store_root)
    _flip(path, 256 + 20)
    before = pathlib.Path(path).read_bytes()
    link = tmp_path / "elsewhere" / "j.journal"
    link.parent.mkdir()
    link.symlink_to(path)
    assert main(["journal", "repair", str(link), "--yes"]) == 0
    assert pathlib.Path(path + ".broken").read_bytes() == before[256:]
    assert not (link.parent / "j.journal.broken").exists()


def test_missing_file_exit_code(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "verify", str(tmp_path / "nope.journal")]) == 3
    assert "No such file" in capsys.readouterr().err


def test_console_script_runs(tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", "journal", "verify", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    help_proc = subprocess.run(
        [sys.executable, "-m", "tether.cli", "journal", "repair", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--yes" in help_proc.stdout


def test_repair_of_a_finished_run_that_would_reopen_it_needs_reopen(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flipped byte before a finished run's end: cutting there would make the run resumable
    (the next worker asked again to approve a transfer that had happened). Refused unless
    asked for on purpose."""
    assert main(["demo", "--root", str(tmp_path / "s"), "--json"]) == 0
    capsys.readouterr()
    path = str(tmp_path / "s" / "runs" / "run-kite-142.journal")
    data = bytearray(pathlib.Path(path).read_bytes())
    data[600] ^= 0x40  # damage early in the file; the run's end comes after it
    pathlib.Path(path).write_bytes(bytes(data))
    assert main(["journal", "repair", path, "--yes"]) == 1
    err = capsys.readouterr().err
    assert "records that the run ended" in err
    assert "--yes --reopen" in err
    assert pathlib.Path(path).read_bytes() == bytes(data)  # nothing changed
    assert main(["journal", "repair", path, "--yes", "--reopen"]) == 0
    assert "repaired" in capsys.readouterr().out


async def test_verify_checks_the_header_in_a_store_whose_runs_is_a_link(
    store_root: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pathlib.Path(await _make_journal(store_root))
    elsewhere = tmp_path / "disk"
    elsewhere.mkdir()
    store = tmp_path / "linked-store"
    store.mkdir()
    (store / "runs").symlink_to(elsewhere)  # the journals on a disk of their own
    (elsewhere / "copied.journal").write_bytes(path.read_bytes())
    assert main(["journal", "verify", str(store / "runs" / "copied.journal")]) == 1
    assert "expected 'copied'" in capsys.readouterr().err
