"""One run of the journal benchmark: every case, repeated, in alternating order."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._cases import build_cases, build_ratios, ratios_between, select_cases
from ._machine import machine_info
from ._report import Report, Result
from ._systems import measure
from ._timing import Window

OnCase = Callable[[int, int, str], None]
"""Called with ``(done, total, label)``: measurements finished, measurements in all, and the
case that starts or has just finished."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How much to measure.

    ``seconds`` counted per case after a warm-up of a third of that (at most 0.2 s),
    ``repeats`` times each; ``cases`` shell patterns on case keys (``None``: every case).
    Build it with ``Settings.of`` to get the documented defaults.
    """

    quick: bool
    seconds: float
    repeats: int
    cases: tuple[str, ...] | None = None

    @classmethod
    def of(
        cls,
        *,
        quick: bool = False,
        seconds: float | None = None,
        repeats: int | None = None,
        cases: Sequence[str] | None = None,
    ) -> Settings:
        """1.5 s windows and three repeats (about 3 minutes for every case); with ``quick``,
        0.3 s and two (about 40 s). ``seconds`` and ``repeats`` override either."""
        return cls(
            quick=quick,
            seconds=seconds or (0.3 if quick else 1.5),
            repeats=repeats or (2 if quick else 3),
            cases=None if cases is None else tuple(cases),
        )

    @property
    def window(self) -> Window:
        return Window(warmup=min(0.2, self.seconds / 3), duration=self.seconds)


def plan(settings: Settings) -> int:
    """How many measurements ``run`` will make with these settings.

    Raises:
        NoSuchCaseError: a pattern in ``settings.cases`` matches no case.
    """
    return len(select_cases(build_cases(), settings.cases)) * settings.repeats


def run(
    root: Path,
    settings: Settings,
    *,
    on_start: OnCase | None = None,
    on_done: OnCase | None = None,
) -> Report:
    """Measure every selected case ``settings.repeats`` times in ``root``, and report.

    The case list is walked forwards on even repeats and backwards on odd ones, so that drift
    in a noisy machine's disk or CPU hits each side of a comparison alike. Each case writes in
    a directory of its own under ``root``, removed afterwards; ``root`` itself is left as it
    was found.

    Raises:
        NoSuchCaseError: a pattern in ``settings.cases`` matches no case.
        OSError: writing in ``root`` failed.
    """
    cases = select_cases(build_cases(), settings.cases)
    ratios = ratios_between(build_ratios(), cases)
    results = {c: Result(c) for c in cases}
    window, repeats = settings.window, settings.repeats
    total, done = len(cases) * repeats, 0
    info = machine_info(root)
    started = time.perf_counter()
    for rep in range(repeats):
        for case in cases if rep % 2 == 0 else cases[::-1]:
            label = case.key if repeats == 1 else f"{case.key} (repeat {rep + 1}/{repeats})"
            if on_start is not None:
                on_start(done, total, label)
            sample = measure(case, root, window)
            results[case].rates.append(sample.rate)
            done += 1
            if on_done is not None:
                on_done(done, total, f"{label}: {sample.rate:,.0f} records/s")
    elapsed = time.perf_counter() - started
    return Report(
        results=results,
        ratios=ratios,
        machine=info,
        settings={
            "quick": settings.quick,
            "duration_s": window.duration,
            "warmup_s": window.warmup,
            "repeats": repeats,
            "cases": None if settings.cases is None else list(settings.cases),
            "elapsed_s": round(elapsed, 1),
        },
    )
