"""What a sweep does with each run it reads, and what it says it found.

A sweep lists the store's runs and reads those that may have changed; for each it decides,
from the journal alone (``run_status``) and the manifest this process can honour, whether to
start it (resume it, let it take answers from its inbox, or, for a *suspect* of a crash loop,
let it take its next step alone), or to note where it rests. ``Sweeper`` sweeps once on the
supervisor's entry, then whenever the store reports a change and at least every
``sweep_interval`` seconds.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass
from typing import final

import anyio

from .._errors import RunNotFoundError, TetherError
from ..journal import Store
from ._entry import Board, Entry
from ._failures import explain, is_store_failure
from ._manifest import CONTRACT, manifest_problem
from ._restart import report_gone
from ._runtime import Runtime
from ._state import RunState, RunStatus, fold
from ._status import Standing, run_status
from ._tasks import RunTasks

log = logging.getLogger("tether.supervisor")

CHANGE_DEBOUNCE = 0.05
"""Seconds to wait after a store reports a change before sweeping, so a burst costs one sweep."""


@dataclass(frozen=True)
class Found:
    """What to do with one run a sweep read.

    Attributes:
        outcome: its status (``running`` when it is started).
        spawn: start it now.
        alone: a suspect: start it after the others, to take its next step alone.
        resumes: it is started to resume work (not only to take queued answers).
        lacks_contract: this process lacks a contract the run pinned (it is started to park
            it, unless another live worker has the contract).
    """

    outcome: Standing
    spawn: bool = False
    alone: bool = False
    resumes: bool = False
    lacks_contract: bool = False


def what_to_do(
    state: RunState, rt: Runtime, *, inbox: bool, listed: Container[str] = ()
) -> Found | None:
    """The sweep's decision for a run whose journal folded to ``state`` (``None``: ignore it,
    it has no ``run_started`` yet); ``inbox``: answers wait in its inbox; ``listed``: the runs
    the sweep found (a run waiting for a child the sweep did not find is started, to create
    the child, or to take its end)."""
    if state.started is None:
        return None
    outcome = run_status(state, rt.clock())
    if outcome.status is RunStatus.SLEEPING and any(
        c.wait is not None
        and c.wait.child is not None
        and str(c.wait.child["run_id"]) not in listed
        and str(c.wait.child["run_id"]) not in state.children
        for c in state.calls.values()
    ):
        return Found(Standing(RunStatus.RUNNING), spawn=True)
    if state.parked is not None and state.parked.cause == CONTRACT and state.finished is None:
        # Parked by a process that lacked its contract: continued by one that has it.
        if manifest_problem(rt, state.manifest) is None:
            return Found(Standing(RunStatus.RUNNING), spawn=True, resumes=True)
        return Found(outcome)
    if outcome.status is RunStatus.RUNNING:
        if manifest_problem(rt, state.manifest) is not None:
            # Started, to journal why it cannot go on here (every view then shows it), unless
            # a worker that can continue it is live (a rolling deploy: see ``_fleet``).
            return Found(Standing(RunStatus.RUNNING), spawn=True, lacks_contract=True)
        if state.interruptions:
            return Found(outcome, spawn=True, alone=True, resumes=True)
        return Found(outcome, spawn=True, resumes=True)
    if not outcome.status.final and inbox:
        # answers wait: the run takes them (until it rests again, it is running)
        return Found(Standing(RunStatus.RUNNING), spawn=True)
    return Found(outcome)


def start_line(store: Store, counts: Counter[str]) -> str:
    """What a supervisor found on entry, in one line."""
    where = getattr(store, "root", None) or type(store).__name__
    total = sum(counts.values())
    if not total:
        return f"serving {where}: no runs yet"
    # Found to resume: started here, each taken up unless another process holds it.
    parts = [f"{counts['resumed']} to resume"] if counts["resumed"] else []
    parts += [f"{n} {status}" for status, n in sorted(counts.items()) if status != "resumed"]
    return f"serving {where}: {total} runs ({', '.join(parts)})"


@final
class Sweeper:
    """The supervisor's sweeps of its store (``sweep``, and ``serve`` between them).

    Args:
        store, rt, board, tasks: the supervisor's store, runtime, board and run tasks.
        tell_parent: called for a child run found ended, with its id and its parent's
            ``(run, call)`` (the parent may not know yet: a crash in between).
    """

    def __init__(
        self,
        store: Store,
        rt: Runtime,
        board: Board,
        tasks: RunTasks,
        *,
        tell_parent: Callable[[str, tuple[str, str]], Awaitable[None]],
    ) -> None:
        self._store = store
        self._rt = rt
        self._board = board
        self._tasks = tasks
        self._tell_parent = tell_parent
        self._scope: anyio.CancelScope | None = None
        self._finished: dict[str, int] = {}
        """Runs found finished, without an entry on the board, by the version they were read
        at (``_packed``): skipped while their version stays the same. Rebuilt from each
        listing, so a run removed from the store (``tether gc``) is forgotten; a
        ``PostgresStore`` lists only unfinished runs, and this stays empty."""

    async def serve(self, interval: float) -> None:
        """Sweep when the store reports a change, and at least every ``interval`` seconds,
        until ``stop``; a sweep that fails (the store is unreachable) is tried at the next."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            while True:
                with anyio.move_on_after(interval):
                    await self._store.changed()  # another process wrote (where it can tell)
                    await anyio.sleep(CHANGE_DEBOUNCE)
                try:
                    await self.sweep()
                except Exception as exc:  # the store is unreachable for now: keep the worker up
                    log.warning("sweep failed (%s); trying again in %ss", explain(exc), interval)

    def _let_go(self, run_id: str, outcome: Standing, entry: Entry | None) -> None:
        """A run read finished: say so if the board thought otherwise, and keep no entry."""
        if entry is not None and entry.known and entry.status is not outcome.status:
            self._board.set(run_id, outcome)  # it finished elsewhere: news to its watchers
        else:
            self._board.release(run_id)

    def stop(self) -> None:
        """End ``serve``."""
        if self._scope is not None:
            self._scope.cancel()

    async def sweep(self) -> Counter[str]:
        """Find runs to resume, take over or continue; skip what cannot have changed.

        Runs whose process stopped while they were active, and that made no progress since
        (suspects of a crash loop), are started after the others and each takes its first step
        alone (see ``_alone``), so that a poisoned run cannot take the others down again.
        Returns how many runs it found in each status (``"resumed"`` for those it started).
        """
        board, tasks = self._board, self._tasks
        counts: Counter[str] = Counter()
        listed = await self._store.run_stats()
        finished, self._finished = self._finished, {}
        order = list(listed)
        # Workers sweeping one store at the same moment then start on different runs, instead
        # of all racing for the same ones in the same order.
        random.shuffle(order)
        suspects: list[tuple[int, str]] = []
        for run_id in order:
            run_stat = listed[run_id]
            stat = run_stat.version
            entry = board.runs.get(run_id)
            if entry is not None:
                if entry.scope is not None:
                    continue  # advanced here right now
                if entry.remote or (run_stat.inbox and not entry.status.final):
                    # owned elsewhere: try its lock (free once the owner died); or answers wait
                    if not entry.remote:
                        board.set(run_id, Standing(RunStatus.RUNNING))
                    tasks.spawn(run_id, None, fresh=False)
                    continue
                if entry.seen == stat:
                    continue  # at rest (or over), and nobody wrote to it since
            elif finished.get(run_id) == (packed := _packed(stat)):
                self._finished[run_id] = packed
                continue  # finished, and nobody wrote to it since
            try:
                events = await self._store.read(run_id)
                state = fold(events)
            except RunNotFoundError:  # removed since the listing (tether gc, say)
                report_gone(run_id, entry)
                continue
            except (TetherError, ValueError, OSError) as exc:
                if is_store_failure(exc):  # out of descriptors, memory, an I/O error: later
                    log.warning("run %s cannot be read now (%s); next sweep", run_id, explain(exc))
                    continue
                log.error("run %s cannot be read: %s", run_id, explain(exc))
                counts["unreadable"] += 1
                board.set(run_id, Standing(RunStatus.NEEDS_ATTENTION, str(exc)), quiet=True)
                board.entry(run_id).seen = stat
                continue
            started = state.started
            parent = None
            if started is not None and started.parent and started.parent_call:
                parent = (started.parent, started.parent_call)
                if state.finished is not None:  # its parent may not know yet (a crash between)
                    await self._tell_parent(run_id, parent)
            found = what_to_do(state, self._rt, inbox=run_stat.inbox, listed=listed)
            if found is not None and found.outcome.status.final and not found.spawn:
                self._let_go(run_id, found.outcome, entry)
                self._finished[run_id] = _packed(stat)
                counts[found.outcome.status.value] += 1
                continue
            entry = board.entry(run_id)
            entry.seen = stat
            if parent is not None:
                entry.parent = parent
            if found is None:
                continue
            outcome = found.outcome
            if found.alone:
                suspects.append((state.interruptions, run_id))
                continue
            if found.lacks_contract:
                taker = await self._rt.taker(state.manifest)
                if taker is not None:
                    log.info(
                        "run %s: left for worker %s, which has its pinned contracts",
                        run_id,
                        taker,
                        extra={"run_id": run_id},
                    )
                    counts["left for another worker"] += 1
                    board.entry(run_id).seen = None  # looked at again next sweep (it may go)
                    board.release(run_id)
                    continue
            if found.spawn:
                board.set(run_id, outcome)
                tasks.spawn(run_id, None, fresh=False)
                counts["resumed" if found.resumes else outcome.status.value] += 1
                continue
            counts[outcome.status.value] += 1
            if not entry.known or (entry.status, entry.reason) != (outcome.status, outcome.reason):
                board.set(run_id, outcome)
            if outcome.wake_at is not None:
                tasks.timers.at(outcome.wake_at, run_id)
        counts["resumed"] += len(suspects)
        for _count, run_id in sorted(suspects):
            log.warning(
                "run %s stopped mid-work without progress before; it takes its next step alone",
                run_id,
            )
            board.set(run_id, Standing(RunStatus.RUNNING))
            tasks.spawn(run_id, None, fresh=False, alone=True)
        return counts


def _packed(version: tuple[int, int]) -> int:
    """A run's version as one int (what is kept of each finished run in the store costs the
    least there is): exact for a ``FileStore``'s ``(size, mtime_ns)``, a size at least 0 and a
    time within 64 bits (two's complement: a time before 1970 too)."""
    first, second = version
    return (first << 64) | (second & _LOW64)


_LOW64 = (1 << 64) - 1
