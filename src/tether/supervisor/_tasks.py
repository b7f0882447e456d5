"""The supervisor's run tasks: one per active run, so many at most advancing at once.

A run's task (``RunTasks.spawn``) waits for a slot (``max_active_runs``) without holding its
journal open, drives the run until it rests (``_restart.drive_until_rest``) under the run's
entry lock, then says where it rests: its status on the board, its next wake-up to the
timers, its end to the run that waits for it. A run at rest holds no task; a finished one, not
even its entry. A drain starts no task any more, lets those advancing finish for a while, then
cancels them.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Awaitable, Callable
from typing import final

import anyio
import anyio.abc

from .._backoff import STORE_RETRY_CAP, Backoff
from ..journal import JournalHandle, Store
from ..journal._descriptors import Descriptors
from ._entry import Board
from ._restart import GONE, LOCKED_ELSEWHERE, OWNED_ELSEWHERE, drive_until_rest, report_gone
from ._runtime import Runtime
from ._state import RunStatus
from ._status import Standing
from ._timers import Timers

log = logging.getLogger("tether.supervisor")


@final
class RunTasks:
    """The tasks advancing runs, in the task group ``tg`` (set while the supervisor runs).

    Args:
        store, rt, board: the supervisor's store, runtime and board.
        limit: at most this many runs advance at once (``None``: half the descriptor limit).
        backoff, max_backoff: the first delay before a crashed run (or a failed store) is
            tried again, and the cap of crash backoffs (a store's is ``STORE_RETRY_CAP``).
        jitter: as the supervisor's (injectable); waits follow ``rt``'s clock.
        tell_parent: called when a child run ends here, with its id and its parent's
            ``(run, call)``.
    """

    def __init__(
        self,
        store: Store,
        rt: Runtime,
        board: Board,
        *,
        limit: int | None,
        backoff: float,
        max_backoff: float,
        jitter: Callable[[], float],
        tell_parent: Callable[[str, tuple[str, str]], Awaitable[None]],
    ) -> None:
        self._store = store
        self._rt = rt
        self._board = board
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._jitter = jitter
        self._tell_parent = tell_parent
        self._active = anyio.CapacityLimiter(active_limit(store, limit))
        self._handed: set[JournalHandle] = set()
        self._count = 0
        self._idle: anyio.Event | None = None
        self.timers = Timers(rt.clock, rt.sleep, self.wake)
        board.forgot = self.timers.forget  # a finished run let go wakes no more
        self.draining = False
        self.tg: anyio.abc.TaskGroup | None = None

    @property
    def running(self) -> bool:
        """Whether runs may be started: in the task group, not draining."""
        return self.tg is not None and not self.draining

    def crowded(self) -> bool:
        """Whether a new run would find no slot now (it should not keep its journal open)."""
        return len(self._handed) >= self._active.available_tokens

    def spawn(
        self, run_id: str, journal: JournalHandle | None, *, fresh: bool, alone: bool = False
    ) -> None:
        """Start a task that drives the run (opening its journal if ``journal`` is ``None``)."""
        if self.tg is None:
            raise RuntimeError("use the Supervisor as an async context manager")
        if self.draining:
            if journal is not None:
                self._handed.add(journal)  # closed on exit
            return
        if journal is not None:
            self._handed.add(journal)  # closed on exit if the task never gets to start
        self._count += 1
        self.tg.start_soon(self._task, run_id, journal, fresh, alone, name=f"tether-run-{run_id}")

    def redrive(self, run_id: str, *, shown_running: bool) -> None:
        """Drive run ``run_id`` once more (an answer came for it), shown as running until it
        rests (``shown_running``; not for a finished run taking in a late signal). Not while
        draining: the answer waits in the journal or the inbox for the next process, and the
        board keeps what the run's last drive left."""
        if not self.running:
            return
        if shown_running:
            self._board.set(run_id, Standing(RunStatus.RUNNING))
        self.spawn(run_id, None, fresh=False)

    def wake(self, run_id: str) -> None:
        """A timer fired: continue the run if it still rests here, not finished."""
        entry = self._board.runs.get(run_id)
        if self.draining or entry is None:
            return
        if entry.status.resting and not entry.status.final and entry.scope is None:
            self._board.set(run_id, Standing(RunStatus.RUNNING))
            self.spawn(run_id, None, fresh=False)

    async def drain(self, patience: float) -> None:
        """Start nothing more; wait up to ``patience`` seconds for the tasks advancing runs to
        end, then cancel every task (each records its run's suspension)."""
        self.draining = True
        runs = self._board.runs
        for entry in runs.values():
            if entry.scope is not None and not entry.driving:
                entry.scope.cancel()  # queued for a slot: nothing of it is in flight
        with anyio.move_on_after(patience):
            while self._count:
                self._idle = anyio.Event()
                await self._idle.wait()
        for entry in runs.values():
            if entry.scope is not None:
                entry.scope.cancel()  # past the drain timeout: each records its suspension

    async def close_handed(self) -> None:
        """Close journals handed to tasks that were cancelled before they started: a store
        that outlives the supervisor would otherwise keep them open (and their runs held)."""
        with anyio.CancelScope(shield=True):
            while self._handed:
                await self._handed.pop().aclose()

    async def _task(
        self, run_id: str, journal: JournalHandle | None, fresh: bool, alone: bool
    ) -> None:
        entry = self._board.entry(run_id)
        try:
            with anyio.CancelScope() as scope:
                entry.scope = scope
                try:
                    if journal is not None:
                        self._handed.discard(journal)
                        try:
                            self._active.acquire_nowait()
                        except anyio.WouldBlock:
                            # No slot yet: wait for one without holding a descriptor.
                            with anyio.CancelScope(shield=True):
                                await journal.aclose()
                            journal = None
                            await self._active.acquire()
                    else:
                        await self._active.acquire()
                    try:
                        async with entry.lock:
                            entry.driving = True
                            outcome = await self._drive(run_id, journal, fresh, alone)
                            journal = None  # _drive closed it
                    finally:
                        entry.driving = False
                        again, entry.posted = entry.posted, False  # (cancelled too)
                        self._active.release()
                    if outcome is not None:
                        self._board.set(run_id, outcome)
                        if outcome.wake_at is not None:
                            self.timers.at(outcome.wake_at, run_id)
                        if outcome.status.final and entry.parent is not None:
                            await self._tell_parent(run_id, entry.parent)
                    if again and outcome is not None:
                        # An answer was queued while this task drove the run, maybe after
                        # the drive's last look at the inbox: the next drive takes it in
                        # (a finished run, a signal: kept, see ``fold_inbox``).
                        self.redrive(run_id, shown_running=not outcome.status.final)
                finally:
                    entry.scope = None
                    entry.release_idle_lock()
                    if self._board.runs.get(run_id) is entry:
                        self._board.release(run_id)  # finished, and nobody uses it: let it go
                    if journal is not None:  # cancelled while queued: never driven
                        with anyio.CancelScope(shield=True):
                            await journal.aclose()
        finally:
            self._count -= 1
            if self._count == 0 and self._idle is not None:
                self._idle.set()

    async def _drive(
        self, run_id: str, journal: JournalHandle | None, fresh: bool, alone: bool
    ) -> Standing | None:
        """Drive the run until it rests (see ``_restart.drive_until_rest``)."""
        outcome = await drive_until_rest(
            self._store,
            self._rt,
            run_id,
            journal,
            fresh=fresh,
            alone=alone,
            crash_backoff=Backoff(self._backoff, self._max_backoff),
            store_backoff=Backoff(self._backoff, STORE_RETRY_CAP),
            sleep=self._rt.sleep,
            jitter=self._jitter,
        )
        if outcome is OWNED_ELSEWHERE or outcome is LOCKED_ELSEWHERE:
            entry = self._board.entry(run_id)
            if outcome is LOCKED_ELSEWHERE and not entry.remote:  # news once, not each sweep
                log.info(
                    "run %s is advanced by another process; taken up here if that one stops",
                    run_id,
                    extra={"run_id": run_id},
                )
            entry.remote = True
            return None
        if outcome is GONE:
            report_gone(run_id, self._board.runs.get(run_id))
            return None
        return outcome


def active_limit(store: Store, wanted: int | None) -> int:
    """How many runs may advance at once: ``wanted``, else a default.

    Each active run holds its journal open. A store with a descriptor budget (a
    ``FileStore``'s ``descriptors``) has room for ``journals`` of them: by default half of
    that, leaving the rest to runs being created (a burst of starts, the children of active
    runs), and never more than one less than all of it, so that an active run creating its
    child always finds a journal token in the end (see ``journal._descriptors``). Other stores
    hold no descriptor per run; for them the default is half the soft ``RLIMIT_NOFILE``.
    """
    budget = getattr(store, "descriptors", None)
    if not isinstance(budget, Descriptors):
        if wanted:
            return wanted
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return 10_000 if soft == resource.RLIM_INFINITY else max(16, soft // 2)
    most = budget.journals - 1
    if not wanted:
        return max(1, budget.journals // 2)
    if wanted > most:
        log.warning(
            "max_active_runs=%d is more runs than the store can hold open at once (%d journals "
            "in its descriptor budget of %d): advancing at most %d at once",
            wanted,
            budget.journals,
            budget.budget,
            most,
        )
        return most
    return wanted
