"""How long an HTTP error response asked its client to wait before asking again.

Both API adapters read the same headers: ``retry-after-ms`` (milliseconds, sent by Anthropic's
and OpenAI's APIs) and the standard ``retry-after`` (seconds, or an HTTP date).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

MAX_RETRY_AFTER = 600.0
"""The longest wait a server may ask for (ten minutes): a longer one is cut to it, so a bad
header cannot park a run's retries for days."""


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait ``headers`` ask for: ``retry-after-ms``, or ``retry-after`` in seconds or as an
    HTTP date; capped at ``MAX_RETRY_AFTER``, ``None`` if absent or unreadable."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return min(max(0.0, float(ms) / 1000), MAX_RETRY_AFTER)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            seconds = float(value)
        except ValueError:
            import email.utils  # an HTTP date is rare; its module costs 20 ms to import

            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER)
