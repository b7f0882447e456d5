"""``python -m tether.testing MODULE:SCENARIO --root DIR --step start|resume [--store URL]
[--schema NAME] [--flat] [--timeline]``: one process of a crash test case; ``run_crashtest``
(and ``tether crashtest``, ``tether demo``) start these. See ``tether.testing._child``."""

from __future__ import annotations

import sys

from ._child import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
