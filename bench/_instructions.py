"""Instructions per step, counted by valgrind (``cachegrind``): a measure of CPU work that does
not move with the machine's load.

CPU time on a shared virtual machine moves by 5-10 % between tries, so a change that saves
2 % cannot be seen in it. The instructions a process executes hardly move (about 0.1 %
between tries of the same case run one after another): ``cachegrind`` with its cache
simulation off counts every user-space instruction of every thread. A case is run at two
numbers of runs, and the difference of the counts divided by the difference of the steps is
what one more step costs, with the interpreter's start-up, the imports and the warm-up run
taken out. It says nothing of cache misses or of the kernel's share (syscalls, ``io_uring``'s
workers): a change that moves work into the kernel, or makes memory access worse, is measured
by CPU time, not here.

Run one case after another, never two at once: valgrind runs the threads of a process in
turn, so what a case does depends on how the others load the machine (how many appends a
sync takes along, say), and two at once moved a count by 5 %.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

CASE_TIMEOUT = 1800.0


def valgrind() -> str | None:
    """The ``valgrind`` executable, or ``None`` when it is not installed."""
    return shutil.which("valgrind")


def count(name: str, argv: Sequence[str], env: dict[str, str]) -> int:
    """The instructions ``argv`` (the case ``name``) executes (every thread, user space), run
    under cachegrind.

    Raises:
        RuntimeError: valgrind is missing, or the program failed (its last line of stderr).
    """
    tool = valgrind()
    if tool is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="cachegrind-") as scratch:
        out, log = Path(scratch, "out"), Path(scratch, "log")
        # valgrind's own lines (its summary last) go to ``log``: stderr is the program's.
        cmd = [tool, "--tool=cachegrind", "--cache-sim=no"]
        cmd += [f"--cachegrind-out-file={out}", f"--log-file={log}"]
        proc = subprocess.run(
            [*cmd, *argv], capture_output=True, text=True, env=env, timeout=CASE_TIMEOUT
        )
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines() or log.read_text().strip().splitlines()
            tail = (lines or ["no output"])[-1]
            raise RuntimeError(f"{name} failed under valgrind (exit {proc.returncode}): {tail}")
        return summary(out.read_text())


def summary(text: str) -> int:
    """The instruction count of a cachegrind output file (its ``summary:`` line, ``Ir`` first).

    Raises:
        RuntimeError: the file has no summary.
    """
    for line in text.splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError("the cachegrind output has no summary line")


def per_step(counts: dict[int, int], steps: int) -> float:
    """Instructions one more step costs, from the counts of a case at two numbers of runs of
    ``steps`` steps each (as the runs make them)."""
    (fewer, low), (more, high) = sorted(counts.items())
    return (high - low) / ((more - fewer) * steps)
