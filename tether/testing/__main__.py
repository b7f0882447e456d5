"""``python -m tether.testing MODULE:SCENARIO --root DIR --step start|resume [--store URL]
[--schema NAME]``: one process of a crash test case; ``run_crashtest`` (and ``tether crashtest``)
start these."""

from __future__ import annotations

import sys

from ._harness import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
