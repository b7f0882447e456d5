"""Output cut short by its reader (``| head``) is not an error, on either store."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import anyio
import pytest

from tether.journal import FileStore, Manifest, ModelResponse, RunStarted

REPO = pathlib.Path(__file__).resolve().parents[2]


async def _big_run(root: pathlib.Path) -> None:
    """A run whose timeline is far longer than a pipe's buffer (64 KiB)."""
    async with FileStore(root) as store:
        started = RunStarted(run_id="run-big", manifest=Manifest(model="m"), messages=[])
        journal = await store.create("run-big", [started])
        async with journal:
            for n in range(40):
                text = {"type": "text", "text": f"step {n} " + "x" * 80}
                await journal.append(
                    [
                        ModelResponse(message={"role": "assistant", "content": [text]})
                        for _ in range(100)
                    ]
                )


@pytest.mark.parametrize(
    "command", [["show", "run-big"], ["show", "run-big", "--json"], ["runs"], ["runs", "--json"]]
)
def test_a_reader_that_stops_early_is_not_an_error(
    tmp_path: pathlib.Path, command: list[str]
) -> None:
    anyio.run(_big_run, tmp_path)
    tether = f"{sys.executable} -m tether.cli"
    line = " ".join([tether, command[0], "--root", str(tmp_path), *command[1:]])
    proc = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line} | head -{0 if command[0] == 'runs' else 1}"],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
