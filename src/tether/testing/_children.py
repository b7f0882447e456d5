"""The child processes a crash test runs, so that stopping the test stops them all.

The cases run in threads, each waiting on a child process of its own. A signal reaches only
the harness's own process (a CI job's timeout sends SIGTERM to it alone), so without this the
children would go on, adopted by init, and their cases' directories would stay behind.
``run`` starts and waits for one child; ``stop_children`` kills every child running (with
``SIGKILL``: each is a case's agent, whose case is abandoned anyway) and makes every later
``run`` raise ``Stopped``, so that each case's thread ends at once and the harness can clean
up.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Mapping, Sequence


class Stopped(Exception):
    """The crash test was stopped: no child is started any more."""


_lock = threading.Lock()
_running: set[subprocess.Popen[bytes]] = set()
_stopped = False


def run(
    argv: Sequence[str], env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to its end (stdin empty, stdout and stderr captured).

    Raises:
        Stopped: the test was stopped, before or while the child ran.
        subprocess.TimeoutExpired: the child ran past ``timeout`` (it was killed).
    """
    with _lock:
        if _stopped:
            raise Stopped
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _running.add(proc)
        if _stopped:  # (stopped while it started: ``stop_children`` may have missed it)
            _kill(proc)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    finally:
        with _lock:
            _running.discard(proc)
    if _stopped:
        raise Stopped
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def stop_children() -> None:
    """Kill every child running now and refuse to start any more. Safe in a signal handler:
    it takes no lock (the frame it interrupted may hold one); a child being started as it
    runs is killed by the thread starting it."""
    global _stopped
    _stopped = True
    for proc in list(_running):
        _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()  # (not if it was reaped already: its pid may be another's by now)
