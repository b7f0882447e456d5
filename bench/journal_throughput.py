"""Journal append throughput: tether's async API next to the baselines it has to beat.

Run ``python bench/journal_throughput.py [--quick] [--dir DIR] [--out FILE] ...``: this is
``tether bench`` (the same code, the same flags; ``tether bench --help`` and the README's
"Benchmarks" section say what each case and ratio is), with ``--out`` writing the JSON report
to ``bench/results/journal_throughput.json`` unless told otherwise. The cases, the timing and
the report live in ``tether.bench``, which ships with the package, so that an operator measures
their own disk with the command the project measures itself with.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tether.cli import main as tether_main

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "journal_throughput.json"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args += ["--out", str(DEFAULT_OUT)]
    return tether_main(["bench", *args])


if __name__ == "__main__":
    sys.exit(main())
