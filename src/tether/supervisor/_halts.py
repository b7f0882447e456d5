"""Cancellations of the runs a supervisor is advancing: carried out at once, not at a pause.

An answer for a run another process holds waits in the run's inbox until its holder records
it at the run's next pause, which is right for an approval (the run asks for it when it
rests) but not for a cancellation: a run that never rests would never stop. So the holder
looks, twice a second and whenever the store reports a change (a PostgreSQL ``NOTIFY``, a
directory store's inotify watch of its inboxes), at the inboxes of the runs it is advancing
(``inbox_versions``: one ``lstat`` each, or one statement; a directory store's watch leaves
out the runs whose inbox did not change since they were last looked at, ``inbox_mark``), and
for one that holds a cancellation it halts the run's task: the call in flight
is cancelled and recorded as interrupted, and the drive takes the queued answers in, the
cancellation among them, before it ends (``_loop._Drive.halt``). Then the run's child runs are
cancelled too.

``Halts.halt`` is also how ``Supervisor.cancel`` stops its own task of a run before it records
the cancellation itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import final

import anyio
import anyio.abc

from ..journal import RunFinished, Store
from ._entry import Board
from ._failures import explain
from ._runtime import Runtime
from ._state import RunState, RunStatus, fold
from ._status import run_status
from ._verbs import cancel_children

log = logging.getLogger("tether.supervisor")

HALT_POLL = 0.5
"""Seconds between looks at the inboxes of the runs this process advances."""


@final
class Halts:
    """The supervisor's watch for cancellations of the runs it advances.

    Args:
        store, rt, board: the supervisor's store, runtime and board.
        tell_parent: called for a child run cancelled here, with its id and its parent's
            ``(run, call)``, so that a parent asleep for it wakes at once.
    """

    def __init__(
        self,
        store: Store,
        rt: Runtime,
        board: Board,
        *,
        tell_parent: Callable[[str, tuple[str, str]], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._tell_parent = tell_parent
        self._rt = rt
        self._board = board
        self._seen: dict[str, Hashable] = {}
        self._cheap = bool(getattr(store, "cheap_inbox_looks", False))
        self._mark_of = getattr(store, "inbox_mark", None)
        # A directory store tells of its inboxes alone (a sweep need not wake for them), and
        # counts what it told; PostgreSQL's change notification covers them.
        self._inbox_changed: Callable[[int], Awaitable[None]] | None = getattr(
            store, "inbox_changed", None
        )
        self._news_count: Callable[[], int] | None = getattr(store, "inbox_news", None)
        if self._inbox_changed is None:
            self._news_count = None
        self._marks: dict[str, Hashable] = {}  # each run's inbox mark at its drive's last look
        # Each run's inbox mark, taken before a look that found it had no inbox (or before it
        # was created here): while the mark stays put, it still has none.
        self._absent: dict[str, Hashable] = {}
        self.tg: anyio.abc.TaskGroup | None = None

    async def queued(self, run_id: str) -> bool:
        """Whether a cancellation waits in the inbox of run ``run_id``, which this process
        advances; asked by its drive before each model or tool call.

        Where the store's look is cheap (a directory store: one ``lstat``, and the inbox read
        only when it changed) it looks now, so no call starts once a cancellation is queued.
        A directory store that watches its directory (``FileStore.inbox_mark``) says when a
        look can find nothing new: then there is none, not even the ``lstat`` (a cancellation
        reaches the mark at the event loop's next poll; ``serve`` is woken by it and halts a
        call in flight). Elsewhere (PostgreSQL) the store's change notification wakes
        ``serve`` instead.
        """
        if not self._cheap:
            return False
        if not self._may_have_changed(run_id):
            return False  # nothing changed in its inbox since the last look
        taken = self._marks.get(run_id)  # (the mark just noted, before the look)
        try:
            version = (await self._store.inbox_versions((run_id,))).get(run_id)
            if version is None:
                self._seen.pop(run_id, None)
                self._found_none(run_id, taken)
                return False
            self._absent.pop(run_id, None)
            if self._seen.get(run_id) == version:
                return False
            self._seen[run_id] = version
            return any(isinstance(a, RunFinished) for a in await self._store.peek_inbox(run_id))
        except BaseException:  # a look cut short saw nothing: the next call looks again
            self._marks.pop(run_id, None)
            self._seen.pop(run_id, None)
            self._absent.pop(run_id, None)
            raise

    def no_inbox(self, run_id: str) -> bool:
        """Whether run ``run_id``, which this process advances, surely has no inbox: a look
        found none (or this process created the run) and its inbox's mark has not moved since
        (never where the store keeps no marks). Its drive then need not look for queued
        answers when the run rests: a post here or by another process on this machine moves
        the mark, and one through another machine's kernel (which moves none) is taken in by
        the next sweep, as for the look before a call."""
        absent = self._absent.get(run_id)
        if absent is None or self._mark_of is None:
            return False
        return bool(self._mark_of(run_id) == absent)

    def posted(self, run_id: str) -> None:
        """An answer is being queued in the inbox of run ``run_id`` from this process: its
        drive looks when the run rests, without waiting for the watch to move the mark."""
        self._absent.pop(run_id, None)

    def _found_none(self, run_id: str, taken: Hashable | None) -> None:
        if taken is None:
            self._absent.pop(run_id, None)
        else:
            self._absent[run_id] = taken

    def mark(self, run_id: str) -> Hashable | None:
        """Run ``run_id``'s inbox mark now, where the store keeps marks (``None`` elsewhere):
        taken before a run is created, for ``created``."""
        return None if self._mark_of is None else self._mark_of(run_id)

    def created(self, run_id: str, mark: Hashable | None) -> None:
        """Run ``run_id`` was just created here, its inbox's mark ``mark`` before it existed:
        nothing could be queued for it then, so its drive's first call need not look at its
        inbox unless the mark has moved since (a post after its creation moves it)."""
        if mark is not None:
            self._marks[run_id] = mark
            self._seen.pop(run_id, None)
            self._absent[run_id] = mark

    async def cascade(self, state: RunState) -> None:
        """Cancel the child runs of ``state``, cancelled just now (halting those advanced
        here first)."""
        finished = state.finished
        if finished is None:
            return
        touched: list[str] = []

        async def halt_child(child: str) -> None:
            touched.append(child)
            await self.halt(child)

        await cancel_children(
            self._store, state, finished.reason, clock=self._rt.clock, halt=halt_child
        )
        for child in touched:
            await self.settle(child)

    async def serve(self, interval: float | None = None) -> None:
        """Look for queued cancellations every ``interval`` seconds (``HALT_POLL``) and at each
        change the store reports, until cancelled; a look that fails is tried again at the
        next."""
        interval = HALT_POLL if interval is None else interval
        since = None if self._news_count is None else self._news_count()
        full_at = anyio.current_time() + interval
        async with anyio.create_task_group() as tg:
            self.tg = tg
            try:
                while True:
                    with anyio.move_on_at(full_at):
                        await self._news_since(since)
                    since = None if self._news_count is None else self._news_count()
                    # Every inbox at least every ``interval``, whatever the marks say: a post
                    # made through another kernel (a network filesystem) moves no mark.
                    full = anyio.current_time() >= full_at
                    if full:
                        full_at = anyio.current_time() + interval
                    try:
                        await self.look(full=full)
                    except Exception as exc:  # the store is unreachable for now
                        log.warning("looking for cancellations failed (%s)", explain(exc))
            finally:
                self.tg = None

    async def _news_since(self, since: int | None) -> None:
        if since is None or self._inbox_changed is None:
            await self._store.changed()
        else:
            await self._inbox_changed(since)

    async def look(self, *, full: bool = True) -> None:
        """Halt each run advanced here whose inbox holds a cancellation; unless ``full``, only
        of those whose inbox may have changed since it was last looked at (``queued``'s marks).

        Raises:
            the first error of a look at an inbox; the other runs' inboxes are looked at
            still, and the one that failed is looked at again next time.
        """
        driving = [
            run_id
            for run_id, entry in self._board.runs.items()
            if entry.driving and run_id not in self._rt.halting
        ]
        if not driving:
            self._seen.clear()
            self._marks.clear()
            self._absent.clear()
            return
        keep = set(driving)
        self._seen = {r: v for r, v in self._seen.items() if r in keep}
        self._marks = {r: m for r, m in self._marks.items() if r in keep}
        self._absent = {r: m for r, m in self._absent.items() if r in keep}
        looking = [r for r in driving if self._may_have_changed(r, every=full)]
        if not looking:
            return
        taken = {r: self._marks.get(r) for r in looking}  # (noted just now, before the look)
        try:
            versions = await self._store.inbox_versions(looking)
        except BaseException:
            for run_id in looking:
                self._marks.pop(run_id, None)
                self._absent.pop(run_id, None)
            raise
        for run_id in looking:
            if run_id not in versions:
                self._seen.pop(run_id, None)  # no inbox
                self._found_none(run_id, taken[run_id])
            else:
                self._absent.pop(run_id, None)
        failed: Exception | None = None
        for run_id, version in versions.items():
            if self._seen.get(run_id) == version:
                continue  # looked at already, and unchanged: no cancellation in it
            try:
                queued = await self._store.peek_inbox(run_id)
            except BaseException as exc:  # looked at again next time
                self._marks.pop(run_id, None)
                if not isinstance(exc, Exception):
                    raise
                failed = failed or exc
                continue
            self._seen[run_id] = version
            if any(isinstance(a, RunFinished) for a in queued) and self.tg is not None:
                self._rt.halting.add(run_id)  # so the next look leaves it alone
                self.tg.start_soon(self._carry_out, run_id, name=f"tether-halt-{run_id}")
        if failed is not None:
            raise failed

    def _may_have_changed(self, run_id: str, *, every: bool = False) -> bool:
        """Whether run ``run_id``'s inbox may have changed since its last look (always where
        the store keeps no marks, or with ``every``); if so, it is noted as looked at with its
        mark now (before the look: a change during it moves the mark)."""
        mark = None if self._mark_of is None else self._mark_of(run_id)
        if mark is None:
            return True
        if not every and self._marks.get(run_id) == mark:
            return False
        self._marks[run_id] = mark
        return True

    async def halt(self, run_id: str) -> bool:
        """Stop this supervisor's task of run ``run_id``, if it has one, and return once it
        has ended (a drive records its calls in flight as interrupted, and takes in the answers
        queued for the run); returns whether there was one. Returns at once when no task of
        it runs here.

        On cancellation: stops waiting; the task still ends.
        """
        entry = self._board.runs.get(run_id)
        if entry is None or entry.scope is None:
            return False
        self._rt.halting.add(run_id)
        try:
            entry.scope.cancel()
            async with entry.lock:  # held while the task drives the run
                pass
        finally:
            self._rt.halting.discard(run_id)
        return True

    async def settle(self, run_id: str, *, halted_here: bool = False) -> None:
        """Show run ``run_id`` on the board as its journal tells it (after a cancellation),
        unless the board shows it so already. With ``halted_here`` (its task here was just
        halted) only while its entry is there: an entry let go was settled by another."""
        state = fold(await self._store.read(run_id))
        outcome = run_status(state, self._rt.clock())
        if not outcome.status.resting:
            return
        entry = self._board.runs.get(run_id)
        if entry is None and halted_here:
            return
        if entry is not None and entry.known and entry.status is outcome.status:
            return  # (the halter and a supervisor's own cancel both settle one race's end)
        self._board.set(run_id, outcome)

    async def _carry_out(self, run_id: str) -> None:
        """Halt run ``run_id`` for the cancellation queued for it, then cancel its children."""
        try:
            await self.halt(run_id)
            state = fold(await self._store.read(run_id))
            finished = state.finished
            if finished is None or finished.status != RunStatus.CANCELLED:
                return  # the drive could not take it in; the next pause or sweep will
            log.warning(
                "run %s: cancelled while it was running: %s",
                run_id,
                finished.reason,
                extra={"run_id": run_id},
            )
            await self.settle(run_id, halted_here=True)
            await self.cascade(state)
            started = state.started
            if self._tell_parent is not None and started and started.parent and started.parent_call:
                await self._tell_parent(run_id, (started.parent, started.parent_call))
        except Exception as exc:
            log.warning("run %s: carrying out its cancellation failed: %s", run_id, explain(exc))
        finally:
            self._rt.halting.discard(run_id)
            self._seen.pop(run_id, None)
            self._marks.pop(run_id, None)
            self._absent.pop(run_id, None)
