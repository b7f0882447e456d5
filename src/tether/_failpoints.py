"""Failpoints: the named places in the runtime where a test may stop the process on purpose.

The runtime calls ``failpoint(NAME)`` at each point below and owns nothing more than a hook,
``None`` by default: disarmed, a failpoint costs two global reads. A test registers what to do
at a point with ``set_hook``. The one hook kept here is the killer, armed for one process
through its environment, so that any program can be crash-tested as it is:

- ``TETHER_CRASH_AT=NAME`` or ``NAME:N`` kills the process with a real ``SIGKILL`` the N-th
  time (from 1, default 1) it passes the failpoint NAME;
- ``TETHER_CRASH_TRACE=PATH`` appends the name of every point passed to PATH, one per line, so
  a harness can list the points a scenario goes through.

The first failpoint a process passes reads the environment (``arm()`` does it at once, so a
process can refuse a bad setting before it starts any work; a ``Supervisor`` reads it as it
is entered, ``check_environment``). This module is the ground floor:
it imports nothing of tether, and the test kit (``tether.testing``) builds on it. The points
(etcd's gofail failpoints work the same way):

``model_answered``   the model returned; its answer is not yet saved
``model_saved``      the model's answer (and its tool calls) is durable
``tool_started``     a ``tool_started`` record is durable; the tool has not run
``tool_returned``    the tool ran (its side effect happened); its result is not yet saved
``result_saved``     the tool's result is durable
``parked``           the run parked (waiting for a person); its journal is closed
``inbox_folded``     answers queued in the run's inbox are durable in its journal; the inbox
                     is not yet cleared
``contract_taken``   the run goes on under a contract it was not driven on before: the
                     ``repinned`` record of a compatible change this process took over, or
                     the ``retried`` record that sends on a run parked for its contract, is
                     durable; the run's next step has not started
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import final

POINTS: tuple[str, ...] = (
    "model_answered",
    "model_saved",
    "tool_started",
    "tool_returned",
    "result_saved",
    "parked",
    "inbox_folded",
    "contract_taken",
    "gc_set_aside",
)
"""Every failpoint the runtime passes."""

ENVIRONMENT = ("TETHER_CRASH_AT", "TETHER_CRASH_TRACE")
"""The variables that arm the test kit's killer for a process."""

Hook = Callable[[str], None]

_hook: Hook | None = None
_looked = False


def failpoint(name: str) -> None:
    """Pass failpoint ``name``: call the hook, if one is armed."""
    hook = _hook
    if hook is not None:
        hook(name)
    elif not _looked:
        _arm_from_environment()
        if _hook is not None:
            _hook(name)


def set_hook(hook: Hook | None) -> Hook | None:
    """Arm ``hook`` for every failpoint from now on (``None`` disarms); returns the last one."""
    global _hook, _looked
    previous, _hook, _looked = _hook, hook, True
    return previous


def _arm_from_environment() -> None:
    global _looked
    _looked = True
    if any(os.environ.get(var) for var in ENVIRONMENT):
        set_hook(killer_from_environment())


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


def check_environment() -> None:
    """Read the environment now if no failpoint has been passed (nor a hook set) yet, so that
    a malformed ``TETHER_CRASH_AT`` stops the program as it starts: read at the first point
    passed, inside a run, it would be taken for that run's crash.

    Raises:
        CrashPointError: ``TETHER_CRASH_AT`` is malformed or names no failpoint.
    """
    if not _looked:
        _arm_from_environment()


def arm() -> None:
    """Arm the killer the environment asks for now (or disarm, when it asks for none).

    Raises:
        CrashPointError: ``TETHER_CRASH_AT`` is malformed or names no failpoint.
    """
    set_hook(killer_from_environment())
