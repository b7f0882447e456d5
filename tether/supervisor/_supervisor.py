"""``Supervisor``: runs one child task per active run, restarts it when it crashes.

Each active run is a child task in the supervisor's task group. A child holds the run's journal
(and its lock) only while it advances the run; a run that parks, waiting for a person, holds no
task, no lock and no file descriptor. A decision or resolution is one durable record, appended
under the journal's lock, after which a child picks the run up again.
"""

from __future__ import annotations

import logging
import random
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal, final

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from .._errors import (
    JournalBrokenError,
    JournalClosedError,
    JournalError,
    JournalLockedError,
    LeaseLostError,
    RunNotFoundError,
    RunStateError,
    TetherError,
)
from ..journal._records import Budgets, Decision, Event, Resolved, RunFinished, RunStarted
from ..journal._store import RunJournal, Store
from ..models._base import Model
from ..testing._crashpoints import crashpoint
from ..tools._registry import ToolRegistry
from ._answers import answer_problem
from ._loop import (
    Outcome,
    Runtime,
    build_manifest,
    classify,
    drive,
    manifest_problem,
)
from ._state import RunStatus, fold

log = logging.getLogger("tether.supervisor")

EVENT_BUFFER = 10_000

CHANGE_DEBOUNCE = 0.05
"""Seconds to wait after a store reports a change before sweeping, so a burst costs one sweep."""

REMOTE_POLL = 0.2
"""Seconds between looks at the journal of a run that another process is advancing."""


@dataclass(frozen=True)
class RunView:
    """A run as ``Supervisor.inspect`` sees it, computed from its journal."""

    run_id: str
    status: RunStatus
    reason: str
    messages: list[dict[str, Any]]
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    restarts: int
    pending: tuple[str, ...]
    final_text: str | None
    events: int


@dataclass(frozen=True)
class StatusChange:
    """One change of a run's status, as ``Supervisor.events`` reports it."""

    run_id: str
    status: RunStatus
    reason: str
    pending: tuple[str, ...]
    at: float


@dataclass(slots=True)
class _Entry:
    """What the supervisor keeps per run. Kept small: a parked run costs only this.

    The lock and the change event are made when first needed and dropped when the run rests
    with nobody waiting on them, so thousands of parked runs hold neither.
    """

    status: RunStatus = RunStatus.RUNNING
    reason: str = ""
    pending: tuple[str, ...] = ()
    scope: anyio.CancelScope | None = None
    remote: bool = False
    seen: tuple[int, int] | None = None
    _changed: anyio.Event | None = None
    _lock: anyio.Lock | None = None

    @property
    def lock(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    def changed(self) -> anyio.Event:
        """An event set at the next status change."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def set(self, outcome: Outcome) -> None:
        self.status, self.reason, self.pending = outcome.status, outcome.reason, outcome.pending
        self.remote = False
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def release_idle_lock(self) -> None:
        lock = self._lock
        if lock is not None and not lock.locked() and lock.statistics().tasks_waiting == 0:
            self._lock = None


@final
class Supervisor:
    """Runs agent runs durably over a store; use as an async context manager.

    On entry it resumes every unfinished run of the store that no other process holds. On exit
    it cancels its children: every point is safe, since all progress is in the journals.

    Args:
        store: where runs live. Entered (and closed) by the supervisor if not entered yet.
        model: the model new runs pin; resumed runs must find their pinned model here.
        tools: the tools new runs pin (latest versions); resumed runs need their pinned ones.
        app_version: pinned in each new run's manifest.
        strict_app_version: resume only runs that pinned this same ``app_version``; others
            stop as ``needs_attention``. Off by default: a deploy usually fixes bugs without
            changing any contract, and the model and tool contracts are always checked.
        max_restarts: restart budget of a run whose ``Budgets`` sets none.
        restart_backoff: first delay before restarting a crashed run; doubles each time, with
            jitter, up to ``max_backoff``.
        model_concurrency: at most this many model calls at once across all runs.
        max_active_runs: at most this many runs advance at once; the others queue. Parked runs
            never count. Each active run holds one file descriptor, so the default is half the
            process's soft ``RLIMIT_NOFILE`` (512 under the common limit of 1,024).
        sweep_interval: every this many seconds, look for runs to take over (their owner
            process died, releasing the journal's lock) or to continue (a decision was recorded
            by another process); ``None`` looks only on entry.
        resume: resume unfinished runs on entry (and sweep); ``False`` only serves runs
            started or acted on through this supervisor.
        clock, sleep, jitter: wall-clock time (deadlines), waiting (restart backoff, timers)
            and the jitter source (``[0, 1)``), injectable so tests need not wait.
    """

    def __init__(
        self,
        store: Store,
        *,
        model: Model,
        tools: ToolRegistry | None = None,
        app_version: str = "",
        strict_app_version: bool = False,
        max_restarts: int = 3,
        restart_backoff: float = 0.05,
        max_backoff: float = 5.0,
        model_concurrency: int | None = None,
        max_active_runs: int | None = None,
        sweep_interval: float | None = 5.0,
        resume: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._rt = Runtime(
            model=model,
            tools=tools or ToolRegistry(),
            load_blob=store.load_blob,
            max_restarts=max_restarts,
            app_version=app_version,
            strict_app_version=strict_app_version,
            model_gate=anyio.Semaphore(model_concurrency) if model_concurrency else None,
            clock=clock,
            mailbox=store,
        )
        self._sleep = sleep
        self._jitter = jitter
        self._app_version = app_version
        self._backoff = restart_backoff
        self._max_backoff = max_backoff
        self._resume = resume
        self._sweep_interval = sweep_interval
        self._active = anyio.CapacityLimiter(max_active_runs or _default_active_limit())
        self._watchers: set[MemoryObjectSendStream[StatusChange]] = set()
        self._runs: dict[str, _Entry] = {}
        self._handed: set[RunJournal] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Supervisor:
        async with AsyncExitStack() as stack:
            if not self._store.entered:
                await stack.enter_async_context(self._store)
            stack.push_async_callback(self._close_handed)  # runs after the children ended
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            stack.callback(self._close_watchers)
            if self._resume:
                await self._sweep()
                if self._sweep_interval is not None:
                    self._tg.start_soon(self._sweeper, name="tether-sweeper")
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        self._tg = None

    # ------------------------------------------------------------------ public actions

    async def start(
        self,
        run_id: str,
        prompt: str | Sequence[dict[str, Any]],
        *,
        system: str | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        """Create run ``run_id`` and start it. Returns once the run exists durably.

        Args:
            prompt: the user's message, or a list of messages in the Messages API shape.
            system: the system prompt (pinned with its hash).
            budgets: limits counted from the journal, so restarts cannot reset them.

        Raises:
            RunExistsError: a run with this id exists.
            InvalidRunIdError: ``run_id`` is not a valid run id.
        """
        messages = (
            [{"role": "user", "content": prompt}]
            if isinstance(prompt, str)
            else [dict(m) for m in prompt]
        )
        manifest = build_manifest(self._rt, system=system, app_version=self._app_version)
        started = RunStarted(
            run_id=run_id, manifest=manifest, messages=messages, budgets=budgets or Budgets()
        )
        journal = await self._store.create(run_id, [started])
        self._set(run_id, Outcome(RunStatus.RUNNING))
        self._spawn(run_id, journal, fresh=True)

    async def wait(
        self,
        run_id: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented API, as asyncio.wait_for
    ) -> RunStatus:
        """Wait until the run reaches a resting status and return it.

        A run this supervisor does not advance (another process holds it, or a dead worker's
        lease has not run out yet) is watched through its journal until it rests or this
        supervisor takes it over: pass a ``timeout`` if nobody may ever advance it.

        Raises:
            RunNotFoundError: no such run.
            TimeoutError: ``timeout`` seconds passed first.

        On cancellation: stops waiting; the run is not affected.
        """
        with anyio.fail_after(timeout):
            while True:
                entry = self._runs.get(run_id)
                if entry is None or entry.remote:
                    # Not advanced here (another process has it, or nobody yet): watch the
                    # run as its journal tells it until it rests or this supervisor takes it.
                    status = (await self.inspect(run_id)).status
                    if status.resting:
                        return status
                    entry = self._runs.get(run_id)
                    if entry is None:
                        await anyio.sleep(REMOTE_POLL)
                        continue
                    if entry.remote:
                        with anyio.move_on_after(REMOTE_POLL):
                            await entry.changed().wait()
                        continue
                if entry.status is not RunStatus.RUNNING:
                    return entry.status
                await entry.changed().wait()

    async def decide(
        self, run_id: str, call_id: str, *, approved: bool, by: str, note: str = ""
    ) -> None:
        """Record a person's approval or rejection of a tool call, then continue the run.

        A rejection reaches the model as an error tool result carrying ``note``.

        Raises:
            RunStateError: the call is not waiting for approval.
            RunNotFoundError: no such run.

        While another process advances the run, the answer waits in the run's inbox and that
        process records it at its next pause (when it would otherwise rest).
        """

        await self._record(run_id, Decision(call_id=call_id, approved=approved, by=by, note=note))

    async def resolve(
        self,
        run_id: str,
        call_id: str,
        *,
        outcome: Literal["succeeded", "retry", "failed"],
        result: Any = None,
        by: str = "",
        note: str = "",
    ) -> None:
        """Record a person's answer to an escalated call, then continue the run.

        ``succeeded``: the call happened, ``result`` is its result. ``retry``: run it again (with
        the same idempotency key). ``failed``: the model gets an error result (``note``).

        Raises:
            RunStateError: the call is not escalated.
            RunNotFoundError: no such run.

        While another process advances the run, the answer waits in the run's inbox and that
        process records it at its next pause (when it would otherwise rest).
        """
        if outcome not in ("succeeded", "retry", "failed"):
            raise ValueError(f"outcome must be succeeded, retry or failed, not {outcome!r}")

        record = Resolved(call_id=call_id, outcome=outcome, result=result, by=by, note=note)
        await self._record(run_id, record)

    async def cancel(self, run_id: str, *, reason: str = "cancelled") -> None:
        """Stop a run for good: its task (if any) is cancelled and ``cancelled`` recorded.

        Raises:
            RunNotFoundError: no such run.
            RunStateError: the run already finished.
        """
        entry = await self._known(run_id)
        if entry.scope is not None:
            entry.scope.cancel()
        record = RunFinished(status=RunStatus.CANCELLED.value, reason=reason)
        if await self._append_answer(run_id, entry, record):
            self._set(run_id, Outcome(RunStatus.CANCELLED, reason))

    async def inspect(self, run_id: str) -> RunView:
        """The run as its journal tells it, with the status this supervisor knows.

        Raises:
            RunNotFoundError: no such run.
        """
        events = await self._store.read(run_id)
        blobs: dict[str, Any] = {}
        state = fold(events, blobs)
        outcome = classify(state, self._rt)
        entry = self._runs.get(run_id)
        if entry is not None and (entry.status.resting or not outcome.status.resting):
            outcome = Outcome(entry.status, entry.reason, entry.pending)
        return RunView(
            run_id=run_id,
            status=outcome.status,
            reason=outcome.reason,
            messages=state.messages,
            model_calls=state.model_calls,
            tool_calls=state.tool_calls,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            restarts=state.restarts,
            pending=outcome.pending,
            final_text=state.final_text,
            events=len(events),
        )

    async def events(self) -> AsyncIterator[StatusChange]:
        """Every status change of every run from now on, as it happens.

        Iterate with ``async for``; the iteration ends when the supervisor exits. Changes are
        buffered (up to 10,000) for a slow reader; past that, changes are dropped with a
        warning rather than slowing the runs down.
        """
        send, receive = anyio.create_memory_object_stream[StatusChange](EVENT_BUFFER)
        self._watchers.add(send)
        try:
            async with receive:
                async for change in receive:
                    yield change
        finally:
            self._watchers.discard(send)
            send.close()

    # ------------------------------------------------------------------ internals

    def _set(self, run_id: str, outcome: Outcome) -> None:
        """Record a run's new status, wake its waiters and tell every watcher."""
        self._entry(run_id).set(outcome)
        log.info(
            "run %s is %s%s",
            run_id,
            outcome.status.value,
            f": {outcome.reason}" if outcome.reason else "",
            extra={"run_id": run_id, "status": outcome.status.value, "reason": outcome.reason},
        )
        if not self._watchers:
            return
        change = StatusChange(
            run_id, outcome.status, outcome.reason, outcome.pending, self._rt.clock()
        )
        for send in list(self._watchers):
            try:
                send.send_nowait(change)
            except anyio.WouldBlock:
                log.warning("a status watcher is too slow; dropped a change of run %s", run_id)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._watchers.discard(send)

    def _close_watchers(self) -> None:
        for send in self._watchers:
            send.close()
        self._watchers.clear()

    def _entry(self, run_id: str) -> _Entry:
        entry = self._runs.get(run_id)
        if entry is None:
            entry = self._runs[run_id] = _Entry()
        return entry

    def _spawn(self, run_id: str, journal: RunJournal | None, *, fresh: bool) -> None:
        if self._tg is None:
            raise RuntimeError("use the Supervisor as an async context manager")
        if journal is not None:
            self._handed.add(journal)  # closed on exit if the child never gets to start
        self._tg.start_soon(self._child, run_id, journal, fresh, name=f"tether-run-{run_id}")

    async def _close_handed(self) -> None:
        """Close journals handed to children that were cancelled before they started: a store
        that outlives the supervisor would otherwise keep them open (and their runs held)."""
        with anyio.CancelScope(shield=True):
            while self._handed:
                await self._handed.pop().aclose()

    async def _known(self, run_id: str) -> _Entry:
        if run_id not in self._runs and not await self._store.exists(run_id):
            raise RunNotFoundError(run_id)
        return self._entry(run_id)

    async def _record(self, run_id: str, record: Decision | Resolved) -> None:
        entry = await self._known(run_id)
        if await self._append_answer(run_id, entry, record):
            self._set(run_id, Outcome(RunStatus.RUNNING))
            self._spawn(run_id, None, fresh=False)

    async def _append_answer(self, run_id: str, entry: _Entry, record: Event) -> bool:
        """Append a person's answer under the journal's lock; ``False`` if it went to the inbox.

        While another process advances the run (it holds the lock), the answer is checked
        against what its journal says so far and queued in the run's inbox; the owner records
        it at its next pause.
        """
        async with entry.lock:  # waits while a child of this supervisor advances the run
            try:
                journal = await self._store.open(run_id)
            except JournalLockedError:
                state = fold(await self._store.read(run_id))
                problem = answer_problem(state, self._rt, record)
                if problem is not None:
                    raise RunStateError(run_id, problem) from None
                await self._store.post(run_id, record)
                return False
            async with journal:
                problem = answer_problem(fold(journal.events), self._rt, record)
                if problem is not None:
                    raise RunStateError(run_id, problem)
                await journal.append([record])
        return True

    async def _child(self, run_id: str, journal: RunJournal | None, fresh: bool) -> None:
        entry = self._entry(run_id)
        if journal is not None:
            self._handed.discard(journal)
        with anyio.CancelScope() as scope:
            entry.scope = scope
            try:
                async with self._active, entry.lock:
                    outcome = await self._run(run_id, journal, fresh)
                    journal = None  # _run closed it
                if outcome is not None:
                    self._set(run_id, outcome)
                    if outcome.wake_at is not None:
                        self._tg_start(self._wake_at, run_id, outcome.wake_at)
            finally:
                entry.scope = None
                entry.release_idle_lock()
                if journal is not None:  # cancelled while queued for a slot: never driven
                    with anyio.CancelScope(shield=True):
                        await journal.aclose()

    def _tg_start(self, func: Any, *args: Any) -> None:
        if self._tg is not None:
            self._tg.start_soon(func, *args)

    async def _run(self, run_id: str, journal: RunJournal | None, fresh: bool) -> Outcome | None:
        """Drive the run, restarting it after a crash; ``None`` if another process owns it."""
        failures = 0
        last_error: str | None = None
        while True:
            try:
                if journal is None:
                    journal = await self._store.open(run_id)
                async with journal:
                    outcome = await drive(journal, self._rt, fresh=fresh, last_error=last_error)
                if outcome.status.resting and not outcome.status.final:
                    crashpoint("parked")
                return outcome
            except Exception as exc:
                lost = _lease_lost(exc)
                if lost is not None:
                    log.warning("run %s: %s; another worker continues it", run_id, lost)
                    self._entry(run_id).remote = True
                    return None
                if isinstance(exc, JournalLockedError):
                    # (also after a crash of ours: another worker may have taken it meanwhile)
                    log.info("run %s is owned by another process", run_id)
                    self._entry(run_id).remote = True
                    return None
                if isinstance(exc, RunNotFoundError):
                    log.error("run %s disappeared from the store", run_id)
                    return None
                if isinstance(exc, JournalError) and not _recoverable(exc):
                    log.error("run %s cannot be opened: %s", run_id, exc)
                    return Outcome(RunStatus.NEEDS_ATTENTION, str(exc))
                failures += 1
                last_error = f"{type(exc).__name__}: {exc}"
                if failures > max(self._rt.max_restarts, 10) + 1:
                    # The journal's restart budget normally ends a crash loop; this catches
                    # failures that happen before a restart can even be recorded.
                    log.error("run %s keeps failing: %s", run_id, last_error)
                    return Outcome(RunStatus.NEEDS_ATTENTION, f"keeps failing: {last_error}")
                log.warning("run %s crashed (%s); restarting", run_id, last_error)
                journal, fresh = None, False
                delay = min(self._max_backoff, self._backoff * 2 ** (failures - 1))
                await self._sleep(delay * (0.5 + self._jitter()))

    async def _wake_at(self, run_id: str, when: float) -> None:
        await self._sleep(max(0.0, when - self._rt.clock()))
        entry = self._entry(run_id)
        if entry.status.resting and not entry.status.final and entry.scope is None:
            self._set(run_id, Outcome(RunStatus.RUNNING))
            await self._child(run_id, None, False)

    async def _sweeper(self) -> None:
        assert self._sweep_interval is not None
        while True:
            with anyio.move_on_after(self._sweep_interval):
                await self._store.changed()  # another process wrote (where the store can tell)
                await anyio.sleep(CHANGE_DEBOUNCE)
            try:
                await self._sweep()
            except Exception as exc:  # the store is unreachable for now: keep the worker up
                log.warning("sweep failed (%s); trying again in %ss", exc, self._sweep_interval)

    async def _sweep(self) -> None:
        """Find runs to resume, take over or continue; skip what cannot have changed."""
        stats = list((await self._store.run_stats()).items())
        # Workers sweeping one store at the same moment then start on different runs, instead
        # of all racing for the same ones in the same order.
        random.shuffle(stats)
        for run_id, run_stat in stats:
            stat = run_stat.version
            entry = self._runs.get(run_id)
            if entry is not None:
                if entry.scope is not None or entry.status.final:
                    continue  # advanced here right now, or over for good
                if entry.remote or run_stat.inbox:
                    # owned elsewhere: try its lock (free once the owner died); or answers wait
                    if not entry.remote:
                        self._set(run_id, Outcome(RunStatus.RUNNING))
                    self._spawn(run_id, None, fresh=False)
                    continue
                if entry.seen == stat:
                    continue  # parked, and nobody wrote to it since
            try:
                events = await self._store.read(run_id)
                state = fold(events)
            except (TetherError, ValueError) as exc:
                log.error("run %s cannot be read: %s", run_id, exc)
                self._set(run_id, Outcome(RunStatus.NEEDS_ATTENTION, str(exc)))
                self._entry(run_id).seen = stat
                continue
            self._entry(run_id).seen = stat
            if state.started is None:
                continue
            outcome = classify(state, self._rt)
            if outcome.status is RunStatus.RUNNING:
                problem = manifest_problem(self._rt, state.manifest)
                if problem is not None:
                    outcome = Outcome(RunStatus.NEEDS_ATTENTION, problem)
                else:
                    self._set(run_id, outcome)
                    self._spawn(run_id, None, fresh=False)
                    continue
            if not outcome.status.final and run_stat.inbox:
                # answers wait: the run takes them (until it rests again, it is running)
                self._set(run_id, Outcome(RunStatus.RUNNING))
                self._spawn(run_id, None, fresh=False)
                continue
            if entry is None or (entry.status, entry.reason) != (outcome.status, outcome.reason):
                self._set(run_id, outcome)
            if outcome.wake_at is not None:
                self._tg_start(self._wake_at, run_id, outcome.wake_at)


def _default_active_limit() -> int:
    """Half the soft descriptor limit: each active run holds its journal open."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(16, soft // 2)


def _lease_lost(exc: BaseException) -> LeaseLostError | None:
    """The ``LeaseLostError`` in ``exc`` (raised where concurrent tool calls ran, it comes
    wrapped in an exception group), if any: the run belongs to another worker now."""
    if isinstance(exc, LeaseLostError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        group = exc.subgroup(LeaseLostError)
        if group is not None:
            return _lease_lost(group.exceptions[0])
    return None


def _recoverable(exc: JournalError) -> bool:
    """A broken or closed handle heals by reopening; corruption and newer formats do not."""
    return isinstance(exc, (JournalBrokenError, JournalClosedError))
