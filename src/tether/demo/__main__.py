"""``python -m tether.demo NAME start|resume --root ROOT [--no-idempotency-key]``: one process of
a demo run, the crash-test child (``python -m tether.testing``) on the demo's scenario, with the
demo's root layout and timeline. ``tether demo`` starts the same child through the harness; see
``tether.demo._demo``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..testing._harness import child_main
from . import SCENARIOS


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SCENARIOS:
        names = "|".join(SCENARIOS)
        print(f"usage: python -m tether.demo {{{names}}} start|resume --root ROOT", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"python -m tether.demo {argv[0]}")
    parser.add_argument("step", choices=("start", "resume"))
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--no-idempotency-key", action="store_true")
    args = parser.parse_args(argv[1:])
    target = SCENARIOS[argv[0]].target(idempotency=not args.no_idempotency_key)
    return child_main(target.child_args(args.root, args.step))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
