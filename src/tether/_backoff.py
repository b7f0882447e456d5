"""Exponential backoff with jitter: one formula for restarts, model retries and tool retries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio


@dataclass(frozen=True)
class Backoff:
    """Waits of ``first`` seconds, doubling with each try up to ``cap``, times a jitter
    factor in ``[0.5, 1.5)`` so that many runs failing together do not retry together."""

    first: float
    cap: float

    def delay(self, tries: int, jitter: Callable[[], float]) -> float:
        """The wait before try ``tries + 1`` (``tries`` >= 1 failures so far).

        The exponent is bounded: ``2.0 ** (tries - 1)`` raises ``OverflowError`` past about
        1,024 tries, and an outage that lasts (a tool's service down for a day, tried once a
        minute) gets there; the wait must stay ``cap`` for good (a product past a float's
        range is ``inf``, which ``min`` caps).
        """
        base = min(self.cap, self.first * 2.0 ** min(max(0, tries - 1), 1000))
        return float(base * (0.5 + jitter()))


MODEL_RETRY = Backoff(first=1.0, cap=60.0)
"""Between attempts at a model call that failed transiently (when the server named no wait)."""

TOOL_RETRY = Backoff(first=1.0, cap=30.0)
"""Between attempts of a tool call that timed out or raised one of its ``retry_on``."""

SERVICE_RETRY = Backoff(first=1.0, cap=60.0)
"""Between attempts of a tool call whose service could not be reached (nothing was sent): as
for a model that is down, tried again for as long as it takes."""

STORE_RETRY_CAP = 30.0
"""The longest wait between attempts to reach a store that failed (a full disk, an outage)."""


async def sleep_unless(
    stop: anyio.Event, sleep: Callable[[float], Awaitable[None]], seconds: float
) -> None:
    """``await sleep(seconds)``, cut short as soon as ``stop`` is set.

    ``sleep`` is the supervisor's injectable one, so tests that replace it never wait.
    """
    if seconds <= 0 or stop.is_set():
        return
    async with anyio.create_task_group() as tg:

        async def _cut_short() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(_cut_short)
        await sleep(seconds)
        tg.cancel_scope.cancel()
