"""What every benchmark script here shares: its command line, its scratch directory, the order
cases take turns in, medians, the results file and optional imports.

The scripts compare systems on a shared, noisy machine, so two habits run through all of them:
cases that are compared run close together in time, in an order that is reversed on every
other repeat (drift then hits each side alike), and what is reported is a median of repeats
and a ratio, with the machine it ran on beside it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from _machine import machine_info

from tether.bench import MEMORY_FILESYSTEMS, scratch_dir

BENCH = Path(__file__).resolve().parent
REPO_ROOT = BENCH.parent
RESULTS = BENCH / "results"

T = TypeVar("T")


def parser(doc: str | None, *, out: str, dir_help: str | None = None) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's docstring, with ``--out`` (the
    results file, ``bench/results/<out>`` by default) and, given ``dir_help``, ``--dir``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    if dir_help is not None:
        p.add_argument("--dir", type=Path, default=None, help=dir_help)
    p.add_argument("--out", type=Path, default=RESULTS / out, help="JSON results file")
    return p


@contextmanager
def workspace(
    base: Path | None, prefix: str, *, packages: Sequence[str] = ()
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A scratch directory and the machine block of its filesystem; removed on exit.

    The default place is next to the checkout rather than the system temp dir, which may be a
    tmpfs where ``fdatasync`` costs nothing; a warning says so when it is one anyway.
    """
    parent = base if base is not None else REPO_ROOT.parent
    parent.mkdir(parents=True, exist_ok=True)
    with scratch_dir(parent, prefix) as root:
        info = machine_info(root, packages=packages)
        if info["filesystem"] in MEMORY_FILESYSTEMS:
            say(f"warning: {root} is on {info['filesystem']}; fsync is free there")
        yield root, info


def say(line: str) -> None:
    """A progress line on stderr (stdout is the report)."""
    print(line, file=sys.stderr, flush=True)


def alternate(items: Sequence[T], repeat: int) -> Sequence[T]:
    """``items`` in order on even repeats and reversed on odd ones (A B C, C B A, A B C ...),
    so that whatever drifts during a round hits the first and the last alike."""
    return items if repeat % 2 == 0 else items[::-1]


def median_try(tries: Sequence[T], key: Callable[[T], float]) -> T:
    """The try with the median ``key`` (the lower middle one of an even count): a whole
    measurement, so that its other figures are that try's own."""
    ranked = sorted(tries, key=key)
    return ranked[(len(ranked) - 1) // 2]


def write_results(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` as indented JSON (values JSON cannot hold, as text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def optional_module(name: str) -> Any | None:
    """Module ``name``, or ``None`` when it (or something it needs) is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` drawing to files (the Agg backend), or ``None`` without it."""
    matplotlib = optional_module("matplotlib")
    if matplotlib is None:
        return None
    matplotlib.use("Agg")
    return optional_module("matplotlib.pyplot")
