"""``python -m tether.demo SCENARIO start|resume --root ROOT``: one process of a demo run.

The demos' orchestrators start these; see ``tether.demo._harness``.
"""

from __future__ import annotations

import sys

from . import SCENARIOS
from ._harness import child_main


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SCENARIOS:
        names = "|".join(SCENARIOS)
        print(f"usage: python -m tether.demo {{{names}}} start|resume --root ROOT", file=sys.stderr)
        return 2
    return child_main(SCENARIOS[argv[0]], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
