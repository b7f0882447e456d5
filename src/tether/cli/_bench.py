"""``tether bench``: journal throughput on the operator's disk, beside plain syncs and SQLite.

The measurement is ``tether.bench``'s; this module chooses where it writes, shows progress on
standard error and prints the report. The default directory is the current one, not the
system's temporary directory: that is often a tmpfs, where ``fdatasync`` costs nothing and a
figure says nothing about a disk. The operator runs it where the journals will live, or names
that place with ``--dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ._input import count, seconds
from ._progress import CaseProgress

_EXIT_USAGE = 2
_EXIT_IO = 3


def add_bench_command(commands: Any) -> None:
    cmd = commands.add_parser(
        "bench",
        help="measure journal appends on this disk beside plain fdatasync and SQLite",
        description="Measure durable appends on the disk that holds DIR: tether's journal "
        "(through io_uring and through its writer threads, one or many journals, several "
        "record and group sizes) beside a plain os.write + fdatasync loop, a bare hand-off "
        "to a syncing thread (the ceiling for any design that keeps fdatasync off the event "
        "loop), aiofiles and SQLite in WAL mode with synchronous=FULL. Every case runs in one "
        "process on one directory, repeated in alternating order; the report gives each "
        "case's median records/s, the ratios between cases (which carry from one machine "
        "to another better than rates do) and the machine and filesystem. Progress goes to "
        "standard error, the report to standard output. Exit 0 when the measurement ran "
        "(whether or not a target was met), 2 on bad usage, 3 when DIR cannot be written.",
    )
    cmd.add_argument(
        "--dir",
        metavar="DIR",
        type=Path,
        default=Path("."),
        help="an existing directory on the disk to measure (default: the current directory); "
        "the cases write in a new directory inside it, removed afterwards",
    )
    cmd.add_argument(
        "--quick",
        action="store_true",
        help="0.3 s per case, two repeats (about 40 s) instead of 1.5 s and three (about 3 min)",
    )
    cmd.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the tables"
    )
    cmd.add_argument(
        "--seconds",
        type=seconds,
        metavar="S",
        help="seconds counted per case, after a warm-up of a third of that (at most 0.2 s)",
    )
    cmd.add_argument(
        "--repeats", type=count, metavar="N", help="times each case runs (median kept)"
    )
    cmd.add_argument(
        "--cases",
        metavar="PATTERN,...",
        help="only the cases whose key matches one of these shell patterns, and the ratios "
        "between them: 'tether/1KiB/g1/w1,plain/1KiB/g1/w1', '*/1KiB/g1/w16'",
    )
    cmd.add_argument("--out", metavar="FILE", type=Path, help="also write the JSON object to FILE")
    cmd.set_defaults(handler=_bench)


def _unusable(directory: Path) -> str | None:
    """Why the benchmark cannot write in ``directory``, or ``None``."""
    if not directory.exists():
        return f"--dir {directory} does not exist"
    if not directory.is_dir():
        return f"--dir {directory} is not a directory (name the directory whose disk to measure)"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"--dir {directory} is not writable"
    return None


def _bench(args: argparse.Namespace) -> int:
    from .. import bench

    settings = bench.Settings.of(
        quick=args.quick,
        seconds=args.seconds,
        repeats=args.repeats,
        cases=args.cases.split(",") if args.cases else None,
    )
    try:
        total = bench.plan(settings)
    except bench.NoSuchCaseError as exc:
        print(f"tether: bench: --cases: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    problem = _unusable(args.dir)
    if problem is not None:
        print(f"tether: bench: {problem}", file=sys.stderr)
        return _EXIT_IO
    try:
        with bench.scratch_dir(args.dir, "tether-bench-") as root:
            dev, _, fstype = bench.mount_of(root)
            if fstype in bench.MEMORY_FILESYSTEMS:
                print(
                    f"tether: bench: warning: {root} is on {fstype}, where fdatasync costs "
                    "nothing; give --dir on the disk to measure",
                    file=sys.stderr,
                )
            window = settings.window
            about = total * (window.warmup + window.duration) * 1.15
            print(
                f"tether bench: {total} measurements ({total // settings.repeats} cases x "
                f"{settings.repeats}) in {root} ({fstype} on {dev}), about {about:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            with CaseProgress(sys.stderr) as progress:
                report = bench.run(
                    root, settings, on_start=progress.started, on_done=progress.finished
                )
    except OSError as exc:
        print(f"tether: bench: writing in {args.dir} failed: {exc}", file=sys.stderr)
        return _EXIT_IO
    data = report.to_json()
    if args.out is not None:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=2) + "\n")
        except OSError as exc:
            print(f"tether: bench: cannot write --out {args.out}: {exc}", file=sys.stderr)
            return _EXIT_IO
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(report.results_table())
        print()
        print(report.ratios_table())
        print()
        print(report.where())
    return 0
