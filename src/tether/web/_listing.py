"""The console's listing of runs: ``tether.operate._listing`` (shared with ``tether runs``)."""

from __future__ import annotations

from ..operate._display import RACY_NS as RACY_NS
from ..operate._display import Listing as Listing
