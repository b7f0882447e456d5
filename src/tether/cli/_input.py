"""What a person types into an answer (``--by``, ``--note``, a call id, ``--data``), checked
before anything is opened: a journal holds only what it can write and read back.

A shell hands a program bytes; Python decodes those that are not UTF-8 into lone surrogates,
which no journal can encode. JSON allows what the journal does not hold either: ``NaN`` and
``Infinity`` (Python's ``json`` accepts them, no strict reader does), a number too large for
a float or for 64 bits, and nesting deep enough to exhaust the parser's stack. Each is
refused here as a usage error that names the option, where it would otherwise end the
command with a traceback, or be recorded as ``null``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from .._errors import quoted

_N = TypeVar("_N", int, float)

NAME_LIMIT = 200
"""The most characters of a ``--by`` name."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters, and the bidirectional controls that reorder what a terminal shows."""
JSON_DEPTH = 256
"""The deepest nesting of ``--data`` or ``--result`` recorded: far past any real payload, and
well within the stack of every process that encodes, decodes or shows it."""
_INT_RANGE = (-(2**63), 2**64 - 1)
"""The integers a journal's MessagePack holds."""
LIMIT_MAX = 2**63 - 1
"""The largest budget a run can be given (``--extend``)."""


def text(value: str) -> str:
    """An argument that is recorded as text (a note, a reason, a call id): valid Unicode.

    Raises:
        argparse.ArgumentTypeError: it held bytes that are not UTF-8.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start].encode("utf-8", "surrogateescape")
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8 (byte {bad!r} at character {exc.start}): {quoted(value)}"
        ) from None
    return value


def some_person(value: str) -> str:
    """An optional ``--by`` (``signal``, ``cancel``): as ``person``, or empty for nobody named.

    Raises:
        argparse.ArgumentTypeError: as ``person``, but for an empty name.
    """
    return value if value == "" else person(value)


def person(value: str) -> str:
    """A ``--by``: who answers, as every view will show them: 1 to ``NAME_LIMIT`` characters of
    valid Unicode without control characters (a newline or an escape sequence would reach
    every terminal that shows the run).

    Raises:
        argparse.ArgumentTypeError: empty, too long, or holding what cannot be shown.
    """
    text(value)
    if not value.strip():
        raise argparse.ArgumentTypeError("a name is needed (who answers is recorded)")
    if len(value) > NAME_LIMIT:
        raise argparse.ArgumentTypeError(
            f"a name is at most {NAME_LIMIT} characters, got {quoted(value)}"
        )
    if _CONTROL.search(value):
        raise argparse.ArgumentTypeError(f"a name holds no control characters: {quoted(value)}")
    return value


def json_value(flag: str, value: str) -> Any:
    """The JSON ``value`` an option (``flag``) was given, as a journal can hold it.

    Raises:
        ValueError: not JSON, or JSON a journal cannot hold (what and why, naming ``flag``).
    """
    try:
        parsed = json.loads(value, parse_constant=_no_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not valid JSON: {exc}") from None
    except _Refused as exc:
        raise ValueError(f"{flag}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{flag} is nested too deeply to record") from None
    if _depth(parsed) > JSON_DEPTH:
        raise ValueError(f"{flag} is nested more than {JSON_DEPTH} levels deep")
    try:
        msgspec.msgpack.encode(parsed)
    except UnicodeEncodeError:
        raise ValueError(
            f"{flag} holds a string that is not valid Unicode (a lone surrogate escape)"
        ) from None
    except RecursionError:
        raise ValueError(f"{flag} is nested too deeply to record") from None
    return parsed


def _depth(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (a walk without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


class _Refused(Exception):
    """A JSON value the journal cannot hold (raised from the parser's hooks)."""


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise _Refused(f"{quoted(literal)} is too large for a number")
    return number


def _int(literal: str) -> int:
    try:
        number = int(literal)
    except ValueError:  # more digits than Python converts (4,300)
        raise _Refused(f"{quoted(literal)} is too large for an integer (64 bits at most)") from None
    low, high = _INT_RANGE
    if not low <= number <= high:
        raise _Refused(f"{quoted(literal)} is too large for an integer (64 bits at most)")
    return number


def seconds(value: str) -> float:
    """A number of seconds more than 0 (and finite: ``inf`` would turn off what it bounds).

    Raises:
        argparse.ArgumentTypeError: not such a number.
    """
    return _number(value, float, lambda n: n > 0 and math.isfinite(n), "must be more than 0")


def some_seconds(value: str) -> float:
    """A number of seconds of 0 or more (finite).

    Raises:
        argparse.ArgumentTypeError: not such a number.
    """
    return _number(value, float, lambda n: n >= 0 and math.isfinite(n), "must be 0 or more")


def count(value: str) -> int:
    """A whole number of 1 or more.

    Raises:
        argparse.ArgumentTypeError: not such a number.
    """
    return _number(value, int, lambda n: n >= 1, "must be 1 or more")


def port(value: str) -> int:
    """A TCP port, 0 to 65535 (0: any free one).

    Raises:
        argparse.ArgumentTypeError: not such a number.
    """
    return _number(value, int, lambda n: 0 <= n <= 65535, "a port is 0 to 65535")


def _number(value: str, kind: Callable[[str], _N], fits: Callable[[_N], bool], rule: str) -> _N:
    """``value`` as a ``kind`` that ``fits``; else a usage error saying the ``rule``."""
    try:
        number = kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {quoted(value)}") from None
    if not fits(number):
        raise argparse.ArgumentTypeError(f"{rule}, not {quoted(value)}")
    return number
