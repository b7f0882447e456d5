"""``Supervisor``: runs one child task per active run, restarts it when it crashes.

Each active run is a child task in the supervisor's task group. A child holds the run's journal
(and its lock) only while it advances the run; a run that parks, waiting for a person, holds no
task, no lock and no file descriptor. A decision or resolution is one durable record, appended
under the journal's lock, after which a child picks the run up again.

Where the rest is: ``_tasks`` (a task per active run), ``_sweep`` (finding runs to resume),
``_entry`` (what is kept per run, and the status changes), ``_children`` (child runs),
``_answers`` (checking and recording a person's answer), ``_restart`` (crashes and store
failures).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, final

import anyio

from .._errors import RunExistsError, RunNotFoundError, RunStateError
from .._failpoints import check_environment
from ..journal import Budgets, JournalHandle, RunStarted, Store, Waiting
from ..journal._records import Resolution, check_types
from ..models import Message, Model, SystemPrompt
from ..tools import ToolRegistry
from . import _verbs as verbs
from ._answers import Recorded
from ._budgets import limits_problem
from ._children import child_started
from ._clock import Clock, SystemClock, dated
from ._entry import Board
from ._entry import Entry as _Entry
from ._entry import RunView as RunView
from ._entry import StatusChange as StatusChange
from ._fleet import Fleet
from ._halts import Halts
from ._manifest import build_manifest
from ._runtime import Runtime
from ._state import RunState, RunStatus, fold
from ._status import Standing, run_status
from ._sweep import Sweeper, start_line
from ._tasks import RunTasks
from ._telemetry import RunTelemetry

log = logging.getLogger("tether.supervisor")

SYSTEM_CLOCK = SystemClock()

REMOTE_POLL = 0.2
"""Seconds between looks at the journal of a run that another process is advancing."""


@final
class Supervisor:
    """Runs agent runs durably over a store; use as an async context manager.

    On entry it resumes every unfinished run of the store that no other process holds. On exit
    it drains: no new model or tool call starts, calls already running may finish and are
    recorded (up to ``drain_timeout``), and the runs still active are then cancelled and
    recorded as ``suspended``, which their next owner does not count as an interruption.

    Args:
        store: where runs live. Entered by the supervisor until it exits; a store entered
            elsewhere too (by the application, or by another supervisor) stays open until the
            last of them leaves, and a store closed before opens again.
        model: the model new runs pin; resumed runs must find their pinned model here.
        tools: the tools new runs pin (latest versions); resumed runs need their pinned ones.
        app_version: pinned in each new run's manifest.
        strict_app_version: resume only runs that pinned this same ``app_version``; others
            stop as ``needs_attention``. Off by default: a deploy usually fixes bugs without
            changing any contract, and the model and tool contracts are always checked.
        max_restarts: crash-loop limit of a run whose ``Budgets`` sets none: how many
            interruptions in a row without progress (its process died while it was active, or
            its task raised) a run may have before it parks as ``needs_attention``. Graceful
            stops and store failures never count; progress starts the count again.
        restart_backoff: first delay before restarting a crashed run (or trying a failed
            store again); doubles each time, with jitter, up to ``max_backoff`` (crashes) or
            30 s (the store).
        drain_timeout: seconds an exit waits for model and tool calls already running to
            finish and be recorded before it cancels them.
        model_concurrency: at most this many model calls at once across all runs.
        max_active_runs: at most this many runs advance at once; the others queue, holding no
            file descriptor. Parked runs never count. Each active run holds its journal open:
            over a ``FileStore`` the default is half the journals its descriptor budget holds
            (``FileStore(descriptors=...)``: 360 under the common soft ``RLIMIT_NOFILE`` of
            1,024, 72 under 256), and a larger value than the budget's journals less one is
            cut down to that (with a warning). Over other stores the default is half the
            soft ``RLIMIT_NOFILE``.
        sweep_interval: every this many seconds, look for runs to take over (their owner
            process died, releasing the journal's lock) or to continue (a decision was recorded
            by another process); ``None`` looks only on entry.
        resume: resume unfinished runs on entry (and sweep); ``False`` only serves runs
            started or acted on through this supervisor.
        on_text: called with ``(run_id, text)`` as a streaming model's answer arrives (a
            model that streams, such as ``AnthropicModel``, streams while it is set), for
            people watching; the text is never made durable (the answer is journaled once,
            whole, when it ends). It must not block.
        telemetry: where the runs' work is reported: ``tether.otel.OpenTelemetry()`` for
            spans and metrics per the GenAI semantic conventions; ``None`` (the default)
            reports nothing and imports nothing.
        clock: where every time the supervisor derives comes from and how it waits: the
            deadlines of runs, approvals and waits, durable timers, backoff and retry times, a
            tool's ``timeout``, and the ``at`` of each record it appends. ``SystemClock()``
            (the default) is real time; ``tether.testing.VirtualClock`` lets a test skip
            through an hour-long wait in milliseconds. Polling the store (sweeps) and
            PostgreSQL leases stay on real time.
        jitter: the jitter source of backoff (``[0, 1)``), injectable for tests.

    Raises:
        ValueError: ``sweep_interval`` is not more than 0.
        TypeError: ``clock`` is not a ``Clock`` (a bare ``time.time`` is not one).
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
        drain_timeout: float = 30.0,
        model_concurrency: int | None = None,
        max_active_runs: int | None = None,
        sweep_interval: float | None = 5.0,
        resume: bool = True,
        on_text: Callable[[str, str], None] | None = None,
        telemetry: RunTelemetry | None = None,
        clock: Clock = SYSTEM_CLOCK,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if sweep_interval is not None and not sweep_interval > 0:
            raise ValueError(f"sweep_interval must be more than 0 seconds, got {sweep_interval!r}")
        if not isinstance(clock, Clock):
            raise TypeError(
                "clock must be a tether.supervisor.Clock (with time() and async sleep()), such "
                f"as SystemClock() or tether.testing.VirtualClock(), got {clock!r}"
            )
        self._store = store
        self._rt = Runtime(
            model=model,
            tools=tools if tools is not None else ToolRegistry(),
            load_blob=store.load_blob,
            max_restarts=max_restarts,
            app_version=app_version,
            strict_app_version=strict_app_version,
            model_gate=(
                anyio.Semaphore(model_concurrency, fast_acquire=True) if model_concurrency else None
            ),
            wall_clock=clock,
            jitter=jitter,
            mailbox=store,
            on_text=on_text,
            read_run=store.read,
            telemetry=telemetry,
        )
        self._rt.start_child = self._start_child
        self._app_version = app_version
        self._drain_timeout = drain_timeout
        self._resume = resume
        self._sweep_interval = sweep_interval
        self._board = Board(clock.time)
        self._tasks = RunTasks(
            store,
            self._rt,
            self._board,
            limit=max_active_runs,
            backoff=restart_backoff,
            max_backoff=max_backoff,
            jitter=jitter,
            tell_parent=self._tell_parent,
        )
        self._timers = self._tasks.timers
        self._sweeper = Sweeper(
            store, self._rt, self._board, self._tasks, tell_parent=self._tell_parent
        )
        self._halts = Halts(store, self._rt, self._board, tell_parent=self._tell_parent)
        self._fleet = Fleet(store, self._rt)
        self._rt.taker = self._fleet.taker
        self._rt.cancel_queued = self._halts.queued
        if resume and sweep_interval is not None:
            # Trusted only while sweeps look at every inbox: a post the watch does not hear
            # (made through another machine's kernel) is then taken in by the next sweep.
            self._rt.no_inbox = self._halts.no_inbox
        self._rt.cascade = self._halts.cascade
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Supervisor:
        # A mistyped TETHER_CRASH_AT stops the program here, not its first run as a crash.
        check_environment()
        async with AsyncExitStack() as stack:
            # Entered for the supervisor's lifetime: a store several holders enter (a
            # script's own ``async with``, supervisors one after another or side by side)
            # closes when the last one leaves.
            await stack.enter_async_context(self._store)
            # Tools from sources (MCP servers) are registered now, and closed after the runs.
            await stack.enter_async_context(self._rt.tools.open_sources())
            stack.push_async_callback(self._tasks.close_handed)  # runs after the tasks ended
            tg = self._tasks.tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            stack.callback(self._board.close)
            await self._check_model()
            tg.start_soon(self._timers.serve, name="tether-timers")
            tg.start_soon(self._halts.serve, name="tether-halts")
            if self._resume:
                # A worker: it says what it can run, for the others of a rolling deploy.
                await self._fleet.enter()
                stack.push_async_callback(self._fleet.leave)
                counts = await self._sweeper.sweep()
                log.info("%s", start_line(self._store, counts))
                if self._sweep_interval is not None:
                    tg.start_soon(self._sweeper.serve, self._sweep_interval, name="tether-sweeper")
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None and not self._tasks.draining:
                cancelled = exc_type is not None and issubclass(
                    exc_type, anyio.get_cancelled_exc_class()
                )
                if not cancelled:  # a cancelled host wants out now: cancel, and record that
                    await self.drain()
        finally:
            if stack is not None:
                await stack.aclose()
            self._tasks.tg = None

    async def drain(self) -> None:
        """Stop starting work, let what runs finish, then stop (what leaving the context does).

        No new model call or tool call starts from now on and no run is started, resumed or
        woken. Calls already running may finish and have their results recorded, for up to
        ``drain_timeout`` seconds; then the supervisor's runs are
        cancelled. Every run that stopped mid-work records ``suspended``, so its next owner
        resumes it without counting an interruption. After a drain the supervisor can only be
        exited. Calling it again does nothing.

        On cancellation (a second signal, say): stops waiting; exiting then cancels the runs
        at once.
        """
        if self._tasks.draining:
            return
        self._rt.stopping.set()
        for opening in list(self._rt.opening):
            opening.cancel()  # nothing of those runs is in flight: no wait for them
        self._sweeper.stop()
        await self._tasks.drain(self._drain_timeout)

    # ------------------------------------------------------------------ public actions

    async def start(
        self,
        run_id: str,
        prompt: str | Sequence[Message],
        *,
        system: SystemPrompt = None,
        budgets: Budgets | None = None,
        drive: bool = True,
    ) -> None:
        """Create run ``run_id`` and start it. Returns once the run exists durably.

        A burst of starts is held back rather than refused: creating a run waits for a file
        descriptor of the store's budget (a ``FileStore``'s ``descriptors``) or a connection
        of its pool (a ``PostgresStore``'s), and for one the process's other code had taken
        (``EMFILE``), while the run does not exist yet. On cancellation while it waits: no
        run is created (once its journal is being written, the run is created and started).

        Args:
            prompt: the user's message, or a list of messages in the Messages API shape.
            system: the system prompt (pinned with its hash).
            budgets: limits counted from the journal, so restarts cannot reset them; by
                default ``Budgets()``, whose ``max_model_calls`` is 100.
            drive: ``False`` only creates the run, pinned to this supervisor's model and
                tools, and leaves it to the next sweep of any worker on the store (this
                supervisor's too, if it sweeps): for a process that hands work to workers, a
                web handler say, whose supervisor is made with ``resume=False``.

        Raises:
            RunExistsError: a run with this id exists.
            InvalidRunIdError: ``run_id`` is not a valid run id.
            RuntimeError: the supervisor is not entered, or is stopping.
            TypeError, ValueError: ``prompt`` is neither a string nor a list of messages (or
                an empty one), ``budgets`` not ``Budgets`` or one of its limits not a whole
                number (seconds for ``deadline_s``) at least 0, or a value of ``messages``
                not JSON: nothing is written.
        """
        if not self._tasks.running:
            raise RuntimeError("the supervisor is not running (enter it, and do not drain it)")
        messages = _start_messages(prompt)
        if budgets is not None and not isinstance(budgets, Budgets):
            raise TypeError(f"budgets: expected tether.Budgets, got {type(budgets).__name__}")
        wrong = None if budgets is None else limits_problem(budgets)
        if wrong is not None:
            raise ValueError(wrong)
        manifest = build_manifest(self._rt, system=system, app_version=self._app_version)
        telemetry = self._rt.telemetry
        # Tracing reports the start only once the run exists: a refused start reports nothing.
        starting: contextlib.AbstractContextManager[dict[str, str] | None] = (
            contextlib.nullcontext() if telemetry is None else telemetry.start_run(run_id)
        )
        with starting as trace:
            started = RunStarted(
                run_id=run_id,
                manifest=manifest,
                messages=messages,
                budgets=budgets or Budgets(),
                trace=trace,
                at=self._rt.clock(),
            )
            check_types(started, f"the start of run {run_id!r}")
            mark = self._halts.mark(run_id)
            journal: JournalHandle | None = await self._store.create(run_id, [started])
        assert journal is not None
        self._halts.created(run_id, mark)
        if not drive:
            await journal.aclose()
            return
        if self._tasks.crowded():
            # No slot for it now: it waits without holding its journal (a descriptor).
            await journal.aclose()
            journal = None
        self._board.set(run_id, Standing(RunStatus.RUNNING))
        self._tasks.spawn(run_id, journal, fresh=True)

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

        A run that finished here and was let go (a finished run costs the supervisor nothing)
        is read from its journal, as a run never seen here is: that first look is not cut
        short by ``timeout`` (``timeout=0`` asks where a run stands without waiting).

        On cancellation: stops waiting; the run is not affected.
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float)
        ):
            raise TypeError(f"timeout: expected seconds or None, got {type(timeout).__name__}")
        entry = self._board.runs.get(run_id)
        if entry is None or not entry.known:
            status = (await self.inspect(run_id)).status
            if status.resting:
                return status
        # (No cancel scope without a timeout: this one was 3% of a one-answer run's CPU.)
        waiting = contextlib.nullcontext() if timeout is None else anyio.fail_after(timeout)
        try:
            with waiting:
                return await self._wait_for_rest(run_id)
        except TimeoutError:
            if timeout is None:
                raise
            last = self._board.runs.get(run_id)
            now = f" (it is {last.status.value})" if last is not None and last.known else ""
            raise TimeoutError(
                f"run {run_id!r} did not come to rest within {timeout:g} s{now}"
            ) from None

    async def _wait_for_rest(self, run_id: str) -> RunStatus:
        """``wait`` without its timeout."""
        while True:
            entry = self._board.runs.get(run_id)
            if entry is None or entry.remote or not entry.known:
                # Not advanced here (another process has it, or nobody yet, or it finished
                # and was let go): watch the run as its journal tells it until it rests or
                # this supervisor takes it.
                status = (await self.inspect(run_id)).status
                if status.resting:
                    return status
                entry = self._board.runs.get(run_id)
                if entry is None or not entry.known:
                    await anyio.sleep(REMOTE_POLL)
                    continue
                if entry.remote:
                    with anyio.move_on_after(REMOTE_POLL):
                        await entry.changed().wait()
                    continue
            if entry.status is not RunStatus.RUNNING:
                return entry.status
            await entry.changed().wait()
            if entry.status.resting:  # the entry says so even if the board let it go
                return entry.status

    async def decide(
        self, run_id: str, call_id: str, *, approved: bool, by: str, note: str = ""
    ) -> None:
        """Record a person's approval or rejection of a tool call, then continue the run.

        A rejection reaches the model as an error tool result carrying ``note``. An approval
        that comes after the call's approval deadline is refused: the deadline's outcome
        (a rejection, or an escalation) stands. The same verb as ``tether.operate.decide``
        and ``tether approve``.

        Raises:
            RunStateError: the call is not waiting for approval (or its deadline passed).
            RunNotFoundError: no such run.

        While another process advances the run, or a task of this supervisor is in a call of
        it, the answer waits in the run's inbox and that process records it at its next pause
        (when it would otherwise rest); the method returns without waiting for that.
        """
        await self._answer(
            run_id,
            lambda: verbs.decide(
                self._store,
                run_id,
                call_id,
                approved=approved,
                by=by,
                note=note,
                clock=self._rt.clock,
            ),
        )

    async def resolve(
        self,
        run_id: str,
        call_id: str,
        *,
        outcome: Resolution,
        result: Any = None,
        by: str = "",
        note: str = "",
    ) -> None:
        """Record a person's answer to an escalated call, then continue the run.

        ``succeeded``: the call happened, ``result`` is its result. ``retry``: run it again (with
        the same idempotency key). ``failed``: the model gets an error result (``note``). The
        same verb as ``tether.operate.resolve`` and ``tether resolve``. A call that waits for
        its tool's service takes ``succeeded`` or ``failed`` too: the way out for a service
        that will not come back.

        Raises:
            ValueError: an unknown outcome, or a ``result`` with ``retry``.
            RunStateError: the call is neither escalated nor waiting for its service.
            RunNotFoundError: no such run.

        While another process advances the run, or a task of this supervisor is in a call of
        it, the answer waits in the run's inbox and that process records it at its next pause
        (when it would otherwise rest); the method returns without waiting for that.
        """
        await self._answer(
            run_id,
            lambda: verbs.resolve(
                self._store,
                run_id,
                call_id,
                outcome=outcome,
                result=result,
                by=by,
                note=note,
                clock=self._rt.clock,
            ),
        )

    async def retry(
        self,
        run_id: str,
        *,
        by: str = "",
        note: str = "",
        budgets: Budgets | None = None,
        extend: Iterable[tuple[str, float]] = (),
    ) -> None:
        """Send on a run the runtime parked (a model that refused, a crash loop, a changed
        contract) or that failed. The same verb as ``tether.operate.retry`` and ``tether retry``.

        Records ``retried``; the run continues from where it stopped. A failed run is re-opened
        (on purpose, and journaled); when it failed on a budget, pass ``budgets`` with the
        limits it may use from now on (they replace the old ones), or ``extend`` to raise some
        by an amount each (``[("max_model_calls", 20)]``).

        Raises:
            ValueError: a bad ``extend``, or both ``budgets`` and ``extend``.
            RunStateError: the run is neither parked by the runtime nor failed (calls waiting
                for a resolution are answered with ``resolve``), or would fail again at once on
                its budgets.
            RunNotFoundError: no such run.
        """
        await self._answer(
            run_id,
            lambda: verbs.retry(
                self._store,
                run_id,
                by=by,
                note=note,
                budgets=budgets,
                extend=extend,
                clock=self._rt.clock,
            ),
        )

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        signal_id: str | None = None,
        by: str = "",
    ) -> None:
        """Deliver the event ``name`` to the run, with ``payload`` (JSON-able).

        A call waiting for ``name`` (``tether.wait_for``) gets ``payload`` as its result. A
        signal that arrives before anything waits for it is kept until a call asks; one whose
        ``signal_id`` the run already has counts once (and is not an error, even once the run
        finished). Give the sender's own id (a webhook's delivery id) as ``signal_id`` so that
        a delivery retried by the sender is not counted twice; by default each call makes a new
        one. The same verb as ``tether.operate.signal`` and ``tether signal``.

        Raises:
            RunNotFoundError: no such run.
            RunStateError: the run already finished (and has no signal of this id).
            ValueError: ``name`` is not an event name, or ``signal_id`` not a signal id.

        While another process advances the run, or a task of this supervisor is in a call of
        it, the signal waits in the run's inbox and that process records it at its next pause;
        the method returns without waiting for that.
        """
        await self._answer(
            run_id,
            lambda: verbs.signal(
                self._store,
                run_id,
                name,
                payload,
                signal_id=signal_id,
                by=by,
                clock=self._rt.clock,
            ),
        )

    async def cancel(self, run_id: str, *, reason: str = "cancelled", by: str = "") -> None:
        """Stop a run for good, and its child runs whose waits are open: each one's task (if
        it runs here) is stopped at once, its call in flight recorded as interrupted, and
        ``cancelled`` recorded with ``reason``. The same verb as ``tether.operate.cancel`` and
        ``tether cancel``.

        While another process advances the run, the cancellation is queued in the run's inbox
        and that process stops the run within about a second, whatever it is doing.

        Raises:
            RunNotFoundError: no such run.
            RunStateError: the run already finished.
        """
        await self._known(run_id)
        touched: list[str] = []
        halted: list[str] = []  # of those, the ones whose task here was stopped

        async def halt(target: str) -> None:
            touched.append(target)
            if await self._halts.halt(target):
                halted.append(target)

        self._check_entered()
        try:
            await verbs.cancel(
                self._store, run_id, reason=reason, by=by, clock=self._rt.clock, halt=halt
            )
        except RunStateError:
            # Finished before this cancellation: by its own drive, maybe, halted here just
            # as it took another one in; the board shows it as its journal ends.
            await self._settle(halted, halted_here=True)
            self._board.release(run_id)
            raise
        except BaseException:
            self._board.release(run_id)  # an entry made only to look (a refused cancel)
            raise
        await self._settle(touched)  # each one cancelled here now, or queued for its holder

    async def _settle(self, run_ids: list[str], *, halted_here: bool = False) -> None:
        for run_id in run_ids:
            with contextlib.suppress(RunNotFoundError):
                await self._halts.settle(run_id, halted_here=halted_here)

    async def inspect(self, run_id: str) -> RunView:
        """The run as its journal tells it, with the status this supervisor knows.

        Raises:
            RunNotFoundError: no such run.
        """
        events = await self._store.read(run_id)
        blobs: dict[str, Any] = {}
        state = fold(events, blobs)
        outcome = run_status(state, self._rt.clock())
        entry = self._board.runs.get(run_id)
        if (
            entry is not None
            and entry.known
            and (entry.status.resting or not outcome.status.resting)
        ):
            outcome = Standing(entry.status, entry.reason, entry.pending)
        return RunView.of(run_id, state, outcome, len(events))

    async def events(self) -> AsyncIterator[StatusChange]:
        """Every status change of every run from now on, as it happens.

        Iterate with ``async for``; the iteration ends when the supervisor exits. Changes are
        buffered (up to 10,000) for a slow reader; past that, changes are dropped with a
        warning rather than slowing the runs down.
        """
        async for change in self._board.changes():
            yield change

    # ------------------------------------------------------------------ internals

    async def _start_child(self, parent: RunState, waiting: Waiting) -> None:
        """Create the child run ``waiting`` asks for (once: a run that exists is left as it is)
        and start it; its budgets are what it asked for within what the parent has left."""
        started = child_started(self._rt, parent, waiting, self._app_version)
        child_id = started.run_id
        # Shielded: the parent's drive holds the parent until the child is on disk and
        # started, so a cancellation of the parent (which stops that drive first) finds it.
        with anyio.CancelScope(shield=True):
            try:
                journal = await self._store.create(child_id, dated([started], self._rt.clock()))
            except RunExistsError:
                return  # created before: it runs here or elsewhere, or ended already
        self._board.entry(child_id).parent = (parent.run_id, waiting.call_id)
        self._board.set(child_id, Standing(RunStatus.RUNNING))
        self._tasks.spawn(child_id, journal, fresh=True)

    async def _tell_parent(self, child_id: str, parent: tuple[str, str]) -> None:
        """Record in the parent that its child ended (best effort: the parent also looks),
        and continue the parent here."""
        await verbs.tell_parent(
            self._store, child_id, parent, clock=self._rt.clock, give=self._answer
        )

    async def _check_model(self) -> None:
        """Say once, loudly, when the model cannot work at all (no credentials)."""
        check = getattr(self._rt.model, "check", None)
        if check is None:
            return
        problem = await check()
        if problem:
            log.error(
                "model %s cannot answer: %s. Runs that ask it park as needs_attention; "
                "fix this, then send them on with `tether retry`",
                self._rt.model.name,
                problem,
            )

    def _check_entered(self) -> None:
        """Raise ``RuntimeError`` unless the supervisor is entered (an answer given to one
        that was exited would reach a closed store, and no drive would act on it)."""
        if self._tasks.tg is None:
            raise RuntimeError(
                "the supervisor is not entered (async with it), or was exited: to answer a "
                "run without one, use tether.operate"
            )

    async def _known(self, run_id: str) -> _Entry:
        if run_id not in self._board.runs and not await self._store.exists(run_id):
            raise RunNotFoundError(run_id)
        return self._board.entry(run_id)

    async def _answer(self, run_id: str, give: Callable[[], Awaitable[Recorded]]) -> Recorded:
        """Give a person's answer (``give``), then continue the run if the answer was appended
        (not queued for another process, nor a signal the run had already). While a task of
        this supervisor drives the run, the answer is queued for that task.

        Raises:
            RuntimeError: the supervisor is not entered (or was exited).
        """
        self._check_entered()
        entry = await self._known(run_id)
        if entry.driving:
            # A task of this supervisor advances the run, maybe for as long as a tool call
            # takes: the answer does not wait for it. The run's journal is held, so it is
            # queued in the run's inbox, for the task to take in at the run's next pause.
            self._halts.posted(run_id)
            done = await give()
            if done.repeated:
                return done  # recorded already, or waiting in the inbox already
            if entry.driving:  # the post may come after its last look: it drives once more
                entry.posted = True
                return done
        else:
            try:
                async with entry.lock:  # waits while another answer of this supervisor lands
                    done = await give()
            finally:
                self._board.release(run_id)  # an entry made only for the lock (refused)
            if done.queued or done.repeated:
                return done  # for another process (it records it), or had already
            self._tasks.redrive(run_id, shown_running=True)  # (a retry re-opens a failed run)
            return done
        # The task let go meanwhile: the answer is taken in by a drive of its own (a signal
        # queued just before the run finished is kept: see ``fold_inbox``).
        self._tasks.redrive(run_id, shown_running=not entry.status.final)
        return done


def _start_messages(prompt: str | Sequence[Message]) -> list[dict[str, Any]]:
    """The first messages of a run asked ``prompt``: a string is the user's one message.

    Raises:
        TypeError: neither a string nor a sequence of messages (mappings).
        ValueError: an empty string or no messages.
    """
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt: an empty string asks the model nothing")
        return [{"role": "user", "content": prompt}]
    given = (
        list(prompt) if isinstance(prompt, Iterable) and not isinstance(prompt, Mapping) else None
    )
    if given is None or not all(isinstance(m, Mapping) for m in given):
        raise TypeError(
            f"prompt: expected a string or a list of messages, got {type(prompt).__name__}"
        )
    if not given:
        raise ValueError("prompt: no messages")
    return [dict(m) for m in given if isinstance(m, Mapping)]  # (every one is: checked)
