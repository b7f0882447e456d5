"""Real ``tether worker`` processes for tests: starting them, watching their logs, stopping
them, and signalling them at moments of their start-up (``Storm``)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._cli import REPO

WORKER = (sys.executable, "-m", "tether.cli", "worker")
WAIT = 60.0
"""Upper bound for a worker process to get somewhere (start, finish its runs, exit)."""


def start(
    args: Sequence[str], *, log: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``tether worker ARGS`` from the repository (so ``tests.*`` apps import), its standard
    error appended to ``log``."""
    with log.open("ab") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*WORKER, *args],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def lines(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def until(
    check: Callable[[], object],
    what: str,
    timeout: float = WAIT,
    *,
    running: subprocess.Popen[bytes] | None = None,
) -> None:
    """Poll ``check`` until it is true; fail the test naming ``what`` after ``timeout``, or
    as soon as the process ``running`` has exited."""
    deadline = time.monotonic() + timeout
    while not check():
        if running is not None and running.poll() is not None:
            raise AssertionError(f"worker exited {running.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def stop(proc: subprocess.Popen[bytes], timeout: float = WAIT) -> int:
    """SIGTERM ``proc`` if it still runs, and its exit status (SIGKILL past ``timeout``)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"worker {proc.pid} did not exit within {timeout} s") from None


MOMENTS = ["first line", "serving", "tool call"]
"""Moments of a worker's start-up read from its log and from the ledger app's trace."""


@dataclass
class Stop:
    """How one worker of a storm was signalled, and how it ended."""

    when: str
    signum: int
    returncode: int
    first_line: bool  # its first log line ("worker PID starting") had run when it exited


class Storm:
    """``tether worker`` processes of the ledger app (``_ledger_app``), one after another on
    one store, each signalled at a moment of its start-up (``signal``).

    Args:
        store: the worker's store options (``--root DIR``, or ``--store URL --schema S``).
        slow: seconds each lookup takes more, so that runs are in flight at every moment.
    """

    def __init__(self, tmp: pathlib.Path, store: Sequence[str], *, slow: float = 1.0) -> None:
        self.store = list(store)
        self.ledger = tmp / "ledger.jsonl"
        self.trace = tmp / "trace.log"
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.slow = slow
        self.stops: list[Stop] = []

    def worker(self, *extra: str) -> tuple[subprocess.Popen[bytes], pathlib.Path]:
        log = self.logs / f"{len(list(self.logs.iterdir())) + 1}.log"
        env = {
            "TETHER_TEST_LEDGER": str(self.ledger),
            "TETHER_TEST_TRACE": str(self.trace),
            "TETHER_TEST_SLOW": str(self.slow),
        }
        args = [*self.store, *extra, "--app", "tests.supervisor._ledger_app:app"]
        return start(args, log=log, env=env), log

    def signal(self, when: str | float, signum: int = signal.SIGTERM, *extra: str) -> Stop:
        """Start a worker, signal it ``when`` (seconds after its start, or a moment of
        ``MOMENTS``), and wait for its exit."""
        proc, log = self.worker(*extra)
        if isinstance(when, float):
            time.sleep(when)
        elif when == "first line":
            until(lambda: any(" starting (" in line for line in lines(log)), when)
        elif when == "serving":
            until(lambda: any(": serving " in line for line in lines(log)), when)
        else:
            assert when == "tool call", when
            mine = f"{proc.pid} "
            until(lambda: any(line.startswith(mine) for line in lines(self.trace)), when)
        proc.send_signal(signum)
        try:
            code = proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"worker signalled at {when} did not exit:\n{log.read_text()[-2000:]}"
            ) from None
        first = any(f"worker {proc.pid} starting" in line for line in lines(log))
        label = f"{when * 1000:.0f} ms" if isinstance(when, float) else when
        stop = Stop(label, signum, code, first)
        self.stops.append(stop)
        if first:  # (a SIGINT before it is Python's KeyboardInterrupt in an import)
            assert "Traceback" not in log.read_text(), log.read_text()
        return stop

    def check(self) -> str:
        """Every worker whose first line had run exited 0; a SIGTERM before it ended the
        interpreter by its default action (it was still importing). Returns the figures."""
        for stop in self.stops:
            if stop.first_line:
                assert stop.returncode == 0, stop
            elif stop.signum == signal.SIGTERM:
                assert stop.returncode in (0, -signal.SIGTERM), stop
            # (a SIGINT then is Python's own KeyboardInterrupt, in the middle of an import)
        early = [s for s in self.stops if not s.first_line]
        return (
            f"signals: {len(self.stops)}; exit 0: {sum(s.returncode == 0 for s in self.stops)}; "
            f"before tether's first line: {len(early)} "
            f"({', '.join(f'{s.when} rc {s.returncode}' for s in early)})"
        )
