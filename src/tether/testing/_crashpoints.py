"""The crash-point killer: ends the process with a real ``SIGKILL`` at a runtime failpoint.

Armed for one process through its environment:

- ``TETHER_CRASH_AT=NAME`` or ``NAME:N`` kills the process the N-th time (from 1, default 1) it
  passes the failpoint NAME (one of ``tether._failpoints.POINTS``).
- ``TETHER_CRASH_TRACE=PATH`` appends the name of every point passed to PATH, one per line, so a
  harness can list the points a scenario goes through.

The runtime arms it itself, from the environment, at the first failpoint a process passes (see
``tether._failpoints``); ``arm()`` does it at once, so that a process can refuse a bad setting
before it starts any work.
"""

from __future__ import annotations

import os
import signal
from typing import final

from .._failpoints import ENVIRONMENT, POINTS, Hook, set_hook


class CrashPointError(ValueError):
    """``TETHER_CRASH_AT`` names no failpoint, or its count is not a whole number >= 1."""


@final
class _Killer:
    def __init__(self, name: str, nth: int, trace: str | None) -> None:
        self.name = name
        self.nth = nth
        self.trace = trace
        self.seen = 0

    def __call__(self, point: str) -> None:
        if self.trace is not None:
            with open(self.trace, "a", encoding="utf-8") as f:
                f.write(point + "\n")
        if point == self.name:
            self.seen += 1
            if self.seen == self.nth:
                os.kill(os.getpid(), signal.SIGKILL)


def parse(spec: str) -> tuple[str, int]:
    """``NAME`` or ``NAME:N`` as ``(name, n)``.

    Raises:
        CrashPointError: naming the setting and what is wrong with it.
    """
    name, sep, nth = spec.partition(":")
    if name not in POINTS:
        raise CrashPointError(
            f"TETHER_CRASH_AT={spec!r}: unknown crash point {name!r}; known: {', '.join(POINTS)}"
        )
    if not sep:
        return name, 1
    if not nth.isdigit() or int(nth) < 1:
        raise CrashPointError(
            f"TETHER_CRASH_AT={spec!r}: N must be a whole number of 1 or more, got {nth!r}"
        )
    return name, int(nth)


def killer_from_environment() -> Hook | None:
    """The killer the environment asks for, or ``None`` when it asks for none.

    Raises:
        CrashPointError: ``TETHER_CRASH_AT`` is malformed or names no failpoint.
    """
    spec = os.environ.get("TETHER_CRASH_AT", "")
    trace = os.environ.get("TETHER_CRASH_TRACE") or None
    if not spec and trace is None:
        return None
    name, nth = parse(spec) if spec else ("", 1)
    return _Killer(name, nth, trace)


def arm() -> None:
    """Arm the killer the environment asks for now (or disarm, when it asks for none).

    Raises:
        CrashPointError: ``TETHER_CRASH_AT`` is malformed or names no failpoint.
    """
    set_hook(killer_from_environment())


__all__ = ["ENVIRONMENT", "POINTS", "CrashPointError", "arm", "killer_from_environment", "parse"]
