"""Named crash points inside the runtime, hit by a real ``SIGKILL`` of the current process.

A crash point is armed for one process through the environment:

- ``TETHER_CRASH_AT=NAME`` or ``NAME:N`` kills the process with ``SIGKILL`` the N-th time (from
  1, default 1) it passes the point called NAME.
- ``TETHER_CRASH_TRACE=PATH`` appends the name of every point passed to PATH, one per line, so a
  harness can list the points a scenario goes through.

Disarmed, a crash point costs one attribute check. Points in the runtime:

``model_answered``   the model returned; its answer is not yet saved
``model_saved``      the model's answer (and its tool calls) is durable
``tool_started``     a ``tool_started`` record is durable; the tool has not run
``tool_returned``    the tool ran (its side effect happened); its result is not yet saved
``result_saved``     the tool's result is durable
``parked``           the run parked (waiting for a person); its journal is closed
``inbox_folded``     answers queued in the run's inbox are durable in its journal; the inbox
                     is not yet cleared
"""

from __future__ import annotations

import os
import signal


class _Arming:
    def __init__(self) -> None:
        spec = os.environ.get("TETHER_CRASH_AT", "")
        name, _, nth = spec.partition(":")
        self.name = name
        self.nth = int(nth) if nth else 1
        self.seen = 0
        self.trace = os.environ.get("TETHER_CRASH_TRACE") or None
        self.active = bool(name) or self.trace is not None


_ARMING = _Arming()


def crashpoint(name: str) -> None:
    """Pass the crash point ``name``: record it if tracing, die here if armed for it."""
    if not _ARMING.active:
        return
    if _ARMING.trace is not None:
        with open(_ARMING.trace, "a", encoding="utf-8") as f:
            f.write(name + "\n")
    if name == _ARMING.name:
        _ARMING.seen += 1
        if _ARMING.seen == _ARMING.nth:
            os.kill(os.getpid(), signal.SIGKILL)
