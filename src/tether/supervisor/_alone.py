"""Letting a suspect run alone: the one mechanism behind poison-run isolation.

A run is a *suspect* when its process stopped while it was active and it has made no progress
since (its journal counts the interruptions). If it is the cause (a tool that segfaults, an
out-of-memory on one ticket), every run that shares its process dies with it again. So a
suspect takes its next step alone: it waits until the steps (model calls and tool runs) of the
other runs in this process have finished, no other run starts a step meanwhile, and once the
suspect has made progress (or rests) the others carry on. A suspect that kills the process
again then takes nobody with it, and its count, not theirs, reaches the crash-loop limit.

Runs that are not suspects pay one counter increment per step: no await unless a suspect is
waiting or running.
"""

from __future__ import annotations

from typing import final

import anyio


@final
class StepGate:
    """Shared for ordinary steps, exclusive for a suspect's (writers first, so it cannot
    starve)."""

    def __init__(self) -> None:
        self._steps = 0
        self._alone = False
        self._queued = 0
        self._waiting = 0  # tasks in ``_wait``: nobody to tell, no event to make
        self._changed = anyio.Event()

    @property
    def steps(self) -> int:
        """Ordinary steps in flight."""
        return self._steps

    async def enter_step(self) -> None:
        """Wait until no suspect runs or waits, then count a step in."""
        while self._alone or self._queued:
            await self._wait()
        self._steps += 1

    def leave_step(self) -> None:
        self._steps -= 1
        if self._steps == 0:
            self._notify()

    async def enter_alone(self) -> None:
        """Wait until no other step is in flight and no other suspect runs, then run alone.

        On cancellation: gives up its place in the queue; nothing is held.
        """
        self._queued += 1
        try:
            while self._alone or self._steps:
                await self._wait()
        except BaseException:
            self._queued -= 1
            self._notify()  # the steps waiting behind it may go
            raise
        self._queued -= 1
        self._alone = True

    def leave_alone(self) -> None:
        if self._alone:
            self._alone = False
            self._notify()

    async def _wait(self) -> None:
        self._waiting += 1
        try:
            await self._changed.wait()
        finally:
            self._waiting -= 1

    def _notify(self) -> None:
        if self._waiting:
            self._changed.set()
            self._changed = anyio.Event()
