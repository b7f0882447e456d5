"""What a tool returns to make its call wait: until a time, for a named event, or for a child run.

A tool that returns ``tether.sleep_until(...)``, ``tether.sleep_for(...)``,
``tether.wait_for(...)`` or ``tether.start_child(...)`` ends its attempt with a ``waiting``
record instead of a result. The run then parks (status ``waiting``) with no task, lock or
descriptor, and the call gets its result when the time comes (the ``result`` given here), when
the event is signalled (the signal's payload) or when the child run ends (its final answer),
whichever process is serving the store then. The wait is journaled before anything else
happens (a child run is created after it, exactly once), so it survives every crash.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Literal, final

import msgspec

from .._errors import quoted

_EVENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")


@final
class Wait:
    """A call's wait, as a tool returns it (build it with ``sleep_until``, ``sleep_for`` or
    ``wait_for``).

    It ends at wall-clock ``until``, or ``delay`` seconds after the supervisor records it (in
    the supervisor's clock, which a test may make virtual), or never by itself (both ``None``).
    """

    __slots__ = ("child", "delay", "event", "ok", "result", "until")

    def __init__(
        self,
        *,
        until: float | None,
        event: str | None,
        result: Any,
        ok: bool,
        child: dict[str, Any] | None = None,
        delay: float | None = None,
    ) -> None:
        self.until = until
        self.event = event
        self.result = result
        self.ok = ok
        self.child = child
        self.delay = delay

    def __repr__(self) -> str:
        what = f"event {self.event!r}" if self.event is not None else "time"
        when = f"until={self.until!r}" if self.delay is None else f"delay={self.delay!r}"
        return f"Wait({what}, {when})"

    def deadline(self, now: float) -> float | None:
        """When the wait ends by itself, for a wait recorded at wall-clock ``now``."""
        return self.until if self.delay is None else now + self.delay

    def plain(self) -> Wait:
        """This wait with its result as plain JSON values (what the journal keeps).

        Raises:
            TypeError: the result cannot be encoded as JSON.
        """
        try:
            result, child = msgspec.json.decode(msgspec.json.encode([self.result, self.child]))
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"a wait's result must be JSON-able: {exc}") from exc
        return Wait(
            until=self.until,
            event=self.event,
            result=result,
            ok=self.ok,
            child=child,
            delay=self.delay,
        )


def sleep_until(when: float | dt.datetime, *, result: Any = None) -> Wait:
    """Make the call wait until wall-clock ``when`` (seconds since the epoch, or an aware
    ``datetime``); then ``result`` is its result.

    Raises:
        ValueError: ``when`` is not a finite time, or a ``datetime`` without a time zone.
    """
    return Wait(until=_timestamp(when), event=None, result=result, ok=True)


def sleep_for(seconds: float, *, result: Any = None) -> Wait:
    """Make the call wait ``seconds`` from now (the supervisor's now, on its clock: the wake
    time is journaled, so a restart does not start the wait again); then ``result`` is its
    result.

    Raises:
        ValueError: ``seconds`` is negative or not finite.
    """
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    return Wait(until=None, event=None, result=result, ok=True, delay=float(seconds))


def wait_for(
    event: str,
    *,
    timeout: float | None = None,
    on_timeout: Literal["error", "result"] = "error",
    result: Any = None,
) -> Wait:
    """Make the call wait for a signal named ``event`` (``Supervisor.signal``, ``tether
    signal``); the signal's payload becomes the call's result.

    Args:
        event: the event's name: 1 to 128 letters, digits and ``._:/-``.
        timeout: seconds to wait at most, from now (on the supervisor's clock); ``None``
            waits for as long as it takes.
        on_timeout: what the call gets when the time is up: ``"error"`` (an error result
            saying so, or ``result`` if given) or ``"result"`` (``result`` as a good result).
        result: the call's result on timeout.

    Raises:
        ValueError: a bad name, timeout or ``on_timeout``.
    """
    if not isinstance(event, str) or not _EVENT.fullmatch(event):
        raise ValueError(
            f"an event name is 1 to 128 letters, digits and ._:/-, got {quoted(event)}"
        )
    if timeout is not None and not (
        isinstance(timeout, int | float) and math.isfinite(timeout) and timeout >= 0
    ):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    if on_timeout not in ("error", "result"):
        raise ValueError(f"on_timeout must be 'error' or 'result', got {on_timeout!r}")
    if on_timeout == "error" and result is None and timeout is not None:
        result = f"no {event!r} event within {timeout:g} s"
    delay = None if timeout is None else float(timeout)
    return Wait(until=None, event=event, result=result, ok=on_timeout == "result", delay=delay)


def start_child(
    prompt: str | list[dict[str, Any]],
    *,
    system: str | list[dict[str, Any]] | None = None,
    budgets: Any = None,
) -> Wait:
    """Start another agent as a child run and make the call wait until it ends.

    The child is a run of its own (its own journal and manifest, the same application's
    model and tools), with a run id made from this run's id and the call's, so a crash never
    starts it twice. Its final answer becomes the call's result (an error result if it
    failed or was cancelled), and what it spends counts towards this run's budgets.

    Args:
        prompt: the child's first user message, or its messages.
        system: its system prompt.
        budgets: its ``tether.Budgets`` (limited, when it starts, to what this run has left).

    Raises:
        ValueError: an empty prompt.
    """
    if not prompt:
        raise ValueError("a child run needs a prompt")
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    spec = {
        "messages": messages,
        "system": system,
        "budgets": None if budgets is None else msgspec.to_builtins(budgets),
    }
    return Wait(until=None, event=None, result=None, ok=True, child=spec)


def _timestamp(when: float | dt.datetime) -> float:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise ValueError("a datetime to sleep until needs a time zone (tzinfo)")
        return when.timestamp()
    if not (isinstance(when, int | float) and math.isfinite(when)):
        raise ValueError(f"a time to sleep until must be a finite number, got {when!r}")
    return float(when)
