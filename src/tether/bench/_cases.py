"""What the journal benchmark measures: its cases, and the ratios that compare them.

A case names one system writing durable records of one size: ``tether`` (``FileJournal.append``
through ``io_uring`` where the kernel allows it), ``tether-threads`` (the same on the writer
threads), ``plain`` (``os.write`` + ``os.fdatasync`` per record, one thread per file),
``aiofiles`` (write, flush and ``fdatasync``, each through the default executor), ``sqlite``
(one row and one commit per record, WAL, ``synchronous=FULL``) and ``handoff`` (each task hands
raw bytes to a thread of its own that writes, syncs and wakes the loop: the least any design
keeping ``fdatasync`` off the event loop pays). A ratio divides one case's median rate by
another's; some carry the target tether is held to.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .._errors import NoSuchCaseError

KiB = 1024
RECORD_SIZES = (128, KiB, 16 * KiB, 256 * KiB)
GROUP_SIZES = (1, 8, 64)
JOURNAL_COUNTS = (1, 16, 64, 256)
PLAIN_THREADS = (16, 64)
SQLITE_WRITERS = (1, 16)
APPENDERS_ON_ONE_JOURNAL = 16

Kind = Literal["tether", "tether-threads", "plain", "aiofiles", "sqlite", "handoff"]


@dataclass(frozen=True)
class Case:
    """One measured configuration.

    ``writers`` is the number of journals, files or database connections written concurrently;
    ``appenders`` the number of tasks appending to each tether journal; ``group`` the events
    per ``append`` (tether only); ``redact`` turns the default ``SecretRedactor`` on.
    """

    kind: Kind
    record_size: int
    group: int = 1
    writers: int = 1
    appenders: int = 1
    redact: bool = False

    @property
    def key(self) -> str:
        """``kind/size/gGROUP/wWRITERS[/aAPPENDERS][/redact]``: ``tether/1KiB/g1/w64``."""
        parts = [self.kind, size_label(self.record_size), f"g{self.group}", f"w{self.writers}"]
        if self.appenders > 1:
            parts.append(f"a{self.appenders}")
        if self.redact:
            parts.append("redact")
        return "/".join(parts)


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two cases' median rates, with an optional target."""

    name: str
    numerator: Case
    denominator: Case
    target: float | None = None


def size_label(n: int) -> str:
    """``128B``, ``1KiB``, ``256KiB``."""
    return f"{n // KiB}KiB" if n >= KiB else f"{n}B"


def build_cases() -> list[Case]:
    """Every case, in an order that keeps the two sides of each comparison next to each other."""
    one_k = [
        Case("tether", KiB),
        Case("tether-threads", KiB),
        Case("plain", KiB),
        Case("aiofiles", KiB),
        Case("tether", KiB, appenders=APPENDERS_ON_ONE_JOURNAL),
        Case("tether", KiB, redact=True),
        Case("sqlite", KiB),
        Case("handoff", KiB),
    ]
    by_size = [
        c
        for size in RECORD_SIZES
        for c in (
            *(Case("tether", size, group=g) for g in GROUP_SIZES),
            Case("plain", size),
        )
    ]
    concurrent = [
        c
        for n in JOURNAL_COUNTS[1:]
        for c in (
            Case("tether", KiB, writers=n),
            *([Case("tether-threads", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("plain", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("handoff", KiB, writers=n)] if n in PLAIN_THREADS else []),
            *([Case("sqlite", KiB, writers=n)] if n in SQLITE_WRITERS else []),
        )
    ]
    cases = one_k + by_size + concurrent
    return list(dict.fromkeys(cases))  # drop repeats (the 1 KiB group-1 cases), keep order


def build_ratios() -> list[Ratio]:
    """Every ratio the report gives, the targeted ones first."""
    tether_1k = Case("tether", KiB)
    ratios = [
        Ratio("1 journal, 1 KiB, async vs plain sync loop", tether_1k, Case("plain", KiB), 1.0),
        Ratio(
            f"1 journal, {APPENDERS_ON_ONE_JOURNAL} appenders vs plain sync loop",
            Case("tether", KiB, appenders=APPENDERS_ON_ONE_JOURNAL),
            Case("plain", KiB),
        ),
        Ratio(
            "64 journals vs 64 plain threads",
            Case("tether", KiB, writers=64),
            Case("plain", KiB, writers=64),
            0.9,
        ),
        Ratio(
            "16 journals vs SQLite WAL FULL, 16 writers",
            Case("tether", KiB, writers=16),
            Case("sqlite", KiB, writers=16),
            5.0,
        ),
        Ratio(
            "ceiling: bare thread hand-off vs plain sync loop",
            Case("handoff", KiB),
            Case("plain", KiB),
        ),
        Ratio(
            "ceiling: 64 bare hand-off threads vs 64 plain threads",
            Case("handoff", KiB, writers=64),
            Case("plain", KiB, writers=64),
        ),
        Ratio(
            "ceiling: 16 plain threads vs SQLite WAL FULL, 16 writers",
            Case("plain", KiB, writers=16),
            Case("sqlite", KiB, writers=16),
        ),
        Ratio("1 journal vs bare thread hand-off", tether_1k, Case("handoff", KiB)),
        Ratio("1 journal: io_uring vs writer threads", tether_1k, Case("tether-threads", KiB)),
        Ratio(
            "64 journals: io_uring vs writer threads",
            Case("tether", KiB, writers=64),
            Case("tether-threads", KiB, writers=64),
        ),
        Ratio(
            "64 journals vs 64 bare hand-off threads",
            Case("tether", KiB, writers=64),
            Case("handoff", KiB, writers=64),
        ),
        Ratio("aiofiles vs tether (1 KiB sequential)", Case("aiofiles", KiB), tether_1k),
        Ratio(
            "16 journals vs 16 plain threads",
            Case("tether", KiB, writers=16),
            Case("plain", KiB, writers=16),
        ),
        Ratio("1 journal vs SQLite WAL FULL, 1 writer", tether_1k, Case("sqlite", KiB)),
        Ratio(
            "1 KiB with default redaction vs without", Case("tether", KiB, redact=True), tether_1k
        ),
    ]
    ratios += [
        Ratio(f"{size_label(s)}, group 1 vs plain sync loop", Case("tether", s), Case("plain", s))
        for s in RECORD_SIZES
        if s != KiB
    ]
    return ratios


def select_cases(cases: Sequence[Case], patterns: Iterable[str] | None) -> list[Case]:
    """The cases whose key matches one of the shell-style ``patterns`` (all for ``None``).

    The order stays that of ``cases``, which keeps compared cases next to each other.

    Raises:
        NoSuchCaseError: a pattern matches no case (a typo would otherwise run nothing).
    """
    if patterns is None:
        return list(cases)
    wanted = list(patterns)
    keys = [c.key for c in cases]
    for pattern in wanted:
        if not fnmatch.filter(keys, pattern):
            raise NoSuchCaseError(pattern, keys)
    return [c for c in cases if any(fnmatch.fnmatchcase(c.key, p) for p in wanted)]


def ratios_between(ratios: Sequence[Ratio], cases: Iterable[Case]) -> list[Ratio]:
    """The ratios both of whose cases are among ``cases``."""
    have = set(cases)
    return [q for q in ratios if q.numerator in have and q.denominator in have]
