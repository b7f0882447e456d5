"""The one agent loop: replay the journal, decide the next step from the state, act, record.

A fresh run and a resumed run go through exactly this code (DESIGN invariant 4). Every step
writes its intent before acting and its outcome before the next decision:

- the model's answer (with its tool calls and their ids) is durable before any tool runs;
- a ``tool_started`` record is durable before the tool runs;
- a tool's result is durable before the model is called again.

The decisions live elsewhere, one place each: whether the run rests and why
(``_status.run_status``), what happens to each tool call (``_replay.next_step``), what an
answer's stop reason decides (``_reply``), whether a resume counts as an interruption and
when a crash loop parks the run (``_resume``), budgets (``_budgets``), one tool attempt
(``_attempt``). This module carries their answers out, and keeps a run's life apart from its
process's: a graceful stop leaves a ``suspended`` record, a model that fails transiently is
asked again within the run, and one that refuses for good parks the run for a person instead
of failing it (DESIGN invariant 9).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio

from .._errors import ModelError, ModelResponseError, RunNotFoundError, ToolArgumentsError
from .._failpoints import failpoint
from ..journal._protocols import JournalHandle
from ..journal._records import (
    Escalated,
    Event,
    ModelFailed,
    ModelResponse,
    Parked,
    Resumed,
    RunFinished,
    Suspended,
    ToolResult,
    ToolStarted,
    Usage,
    Waiting,
)
from ..models._base import text_sink
from ..tools._context import ToolContext
from ..tools._spec import ToolSpec
from ._answers import answer_problem, repeated
from ._attempt import attempt as run_attempt
from ._attempt import cancelled_from_outside, error_result, ok_result
from ._backoff import MODEL_RETRY, sleep_unless
from ._budgets import budget_problem
from ._children import child_ended
from ._manifest import build_manifest as build_manifest
from ._manifest import manifest_problem as manifest_problem
from ._replay import (
    SAFE_TO_REPEAT,
    Escalate,
    Record,
    Rest,
    RetryAt,
    Run,
    Verify,
    WaitForPerson,
    next_step,
)
from ._reply import act_on_stop, unique_call_ids
from ._resume import cause_of, crash_loop_records, pinned_approval, was_interrupted
from ._runtime import Interruption as Interruption
from ._runtime import Runtime as Runtime
from ._runtime import Suspend, definitions, spec_for
from ._state import Call, RunState, RunStatus, fold
from ._status import Outcome, run_deadline, run_status
from ._telemetry import ChatTelemetry, DriveTelemetry
from ._traced import chat_scope, open_drive, started_seq, tool_scope

log = logging.getLogger("tether.supervisor")

MALFORMED_LIMIT = 3
"""Malformed answers in a row after which a run parks instead of asking the model again."""

SUSPEND_TIMEOUT = 5.0
"""Seconds a cancelled run may take to record that it was suspended (best effort)."""


async def drive(
    journal: JournalHandle,
    rt: Runtime,
    *,
    fresh: bool,
    prior: Interruption | None = None,
    alone: bool = False,
) -> Outcome | None:
    """Advance the run in ``journal`` until it finishes or must wait for a person.

    Returns the resting outcome, or ``None`` when the supervisor is stopping (``rt.stopping``):
    no new model or tool call is started, the run records ``suspended`` and its next owner
    resumes it without counting an interruption. The journal stays open; the caller closes it.

    ``fresh`` says the run was just created. Otherwise a run found mid-work records
    ``resumed``, with the cause of its interruption: ``prior`` when this process saw it (the
    store failed, or the run's task raised), else what the journal says (a graceful stop, or
    a process that died). Charged interruptions in a row without progress beyond the run's
    restart limit park it as ``needs_attention`` (a crash loop), naming the call it was running
    when there is one. ``alone`` runs the run's first step with no other run's step in flight
    (a suspect of such a loop; see ``_alone``).

    Raises:
        JournalError: the journal could not be written (the run's task should crash and
            recover by reopening).

    On cancellation: stops at the next await and records ``suspended`` (shielded, best
    effort); everything recorded so far is durable and the run resumes from there.
    """
    stepper = _Drive(journal, rt, alone=alone)
    try:
        await stepper.load()
        stepper.begin_trace(fresh=fresh, prior=prior)
        outcome = await stepper.run(fresh=fresh, prior=prior)
        stepper.end_trace(status=outcome.status.value, reason=outcome.reason)
        return outcome
    except Suspend:
        await stepper.suspend("the supervisor stopped (graceful shutdown)")
        stepper.end_trace(status=None, reason="suspended: the supervisor stopped")
        return None
    except anyio.get_cancelled_exc_class():
        with anyio.move_on_after(SUSPEND_TIMEOUT, shield=True):
            await stepper.suspend("cancelled")
        stepper.end_trace(status=None, reason="cancelled")
        raise
    except BaseException as exc:
        stepper.end_trace(status=None, error=exc)
        raise
    finally:
        stepper.leave_alone()


@dataclass
class _Drive:
    """One drive of one run: its journal, its folded state and what this drive started."""

    journal: JournalHandle
    rt: Runtime
    alone: bool = False
    state: RunState = field(default_factory=RunState)
    blobs: dict[str, Any] = field(default_factory=dict)
    prestarted: set[str] = field(default_factory=set)  # started with the answer, not yet run
    holds_gate: bool = False
    resume_record: Resumed | None = None  # written just before the drive's first step
    trace: DriveTelemetry | None = None  # this drive as reported to tracing, if traced

    def begin_trace(self, *, fresh: bool, prior: Interruption | None) -> None:
        self.trace = open_drive(self.rt, self.state, self.journal.run_id, fresh=fresh, prior=prior)

    def end_trace(
        self, *, status: str | None, reason: str = "", error: BaseException | None = None
    ) -> None:
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.end(status=status, reason=reason, error=error)

    async def load(self) -> None:
        await _load_blobs(self.journal, self.rt, self.blobs)
        self.state = fold(self.journal.events, self.blobs)
        if self.state.started is None:
            raise ValueError(f"run {self.journal.run_id!r} has no run_started record")

    async def run(self, *, fresh: bool, prior: Interruption | None) -> Outcome:
        state, rt = self.state, self.rt
        if state.finished is not None:
            return run_status(state, rt.clock())
        problem = manifest_problem(rt, state.manifest)
        if problem is not None:
            return Outcome(RunStatus.NEEDS_ATTENTION, problem)
        if not fresh and was_interrupted(state, rt.clock()):
            parked = await self._resumed(prior)
            if parked is not None:
                return parked
        if self.alone:
            await rt.gate.enter_alone()
            self.holds_gate = True
        if not fresh:  # a run created just now has no call an answer could be for yet
            await self._fold_inbox()
        while True:
            outcome = run_status(state, rt.clock())
            if outcome.status is not RunStatus.RUNNING and await self._fold_inbox():
                continue  # answers queued while this process held the journal: act on them
            if outcome.status is RunStatus.WAITING and await self._look_at_children():
                continue  # a child run it waits for has ended
            if outcome.status is not RunStatus.RUNNING:
                deadline = run_deadline(state)
                if not outcome.status.final and deadline is not None and rt.clock() >= deadline:
                    budgets = state.budgets
                    reason = f"deadline of {budgets.deadline_s:g} s passed while {outcome.status}"
                    return await self._finish(RunStatus.FAILED, reason)
                return outcome
            if state.turn_open:
                await self._advance_calls()
            else:
                over = budget_problem(state, rt.clock(), for_model=True)
                if over is not None:
                    return await self._finish(RunStatus.FAILED, over)
                await self._call_model()
            if self.holds_gate and state.interruptions == 0:
                self.leave_alone()  # it made progress: no longer a suspect

    # ------------------------------------------------------------------ resuming

    async def _resumed(self, prior: Interruption | None) -> Outcome | None:
        """Count the interruption; park the run at once if it is the latest of a crash loop.

        Otherwise its ``resumed`` record waits for the run's first step (``_enter_step``): a
        run that never gets to act in this process (it waits behind a suspect running alone,
        say) is not charged if the process dies meanwhile, since it was not running then.
        """
        state, rt = self.state, self.rt
        cause = prior or cause_of(state)
        resumed = Resumed(
            attempt=state.restarts + 1,
            host=rt.host,
            pid=os.getpid(),
            cause=cause.cause,
            charged=cause.charged,
        )
        limit = state.budgets.max_restarts
        limit = rt.max_restarts if limit is None else limit
        n = state.interruptions + cause.charged
        if n <= limit:
            self.resume_record = resumed
            return None
        records: list[Event] = [resumed, *crash_loop_records(state, n, limit, cause.cause)]
        log.error(
            "run %s: stopped %d times in a row without progress; parked for a person (%s)",
            self.journal.run_id,
            n,
            cause.cause,
            extra={"run_id": self.journal.run_id},
        )
        await self._append(records)
        return run_status(state, rt.clock())

    async def suspend(self, reason: str) -> None:
        """Record that this owner stopped on purpose (best effort: never raises)."""
        journal = self.journal
        if journal.broken or not self.acted_or_resumed():
            return
        try:
            await journal.append([Suspended(reason=reason, host=self.rt.host, pid=os.getpid())])
        except Exception as exc:  # a broken handle or a lost lease: the next owner charges it
            log.debug("run %s: could not record the suspension: %s", journal.run_id, exc)

    def acted_or_resumed(self) -> bool:
        """Whether there is a stop worth recording: the run is unfinished and not at rest."""
        if self.state.finished is not None or self.state.started is None:
            return False
        if isinstance(self.state.last, Suspended):
            return False
        return run_status(self.state, self.rt.clock()).status is RunStatus.RUNNING

    def leave_alone(self) -> None:
        if self.holds_gate:
            self.holds_gate = False
            self.rt.gate.leave_alone()

    # ------------------------------------------------------------------ the model

    async def _call_model(self) -> None:
        state, rt = self.state, self.rt
        failure = state.last_model_failure
        if failure is not None and failure.retry_at is not None:
            await self._pause_until(failure.retry_at)
        self._check_stopping()
        tools = definitions(rt, state.manifest)
        # A new list, so a model that appends to it cannot touch the run's state; the messages
        # themselves are shared (the Model protocol forbids changing them): copying each one
        # at every call made a step's cost grow with the run's length.
        messages = list(state.messages)
        counted = await self._enter_step()
        token = None if rt.on_text is None else text_sink.set(partial(rt.on_text, state.run_id))
        failed: ModelError | None = None
        try:
            if rt.model_gate is not None:
                async with rt.model_gate:
                    self._check_stopping()
                    with chat_scope(self.trace, self.state, messages) as chat:
                        reply = await self._ask(messages, tools, chat)
            else:
                with chat_scope(self.trace, self.state, messages) as chat:
                    reply = await self._ask(messages, tools, chat)
        except ModelError as exc:
            failed = exc
        finally:
            if token is not None:
                text_sink.reset(token)
            if counted:
                rt.gate.leave_step()
        if failed is not None:
            await self._model_failed(failed)
            return
        failpoint("model_answered")
        message = reply.as_message()
        unique_call_ids(message, state, self.journal.run_id)
        records: list[Event] = [
            ModelResponse(
                message=message,
                usage=reply.usage,
                stop_reason=reply.stop_reason,
                stop_details=reply.stop_details,
            )
        ]
        uses = [b for b in message["content"] if b.get("type") == "tool_use"]
        settled = act_on_stop(reply.stop_reason, uses)
        starts = [] if settled else self._starts_with_answer(uses)
        await self._append([*records, *settled, *starts])
        self.prestarted.update(s.call_id for s in starts)
        failpoint("model_saved")

    async def _ask(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        chat: ChatTelemetry | None,
    ) -> Any:
        reply = await self.rt.model(
            system=self.state.manifest.system_prompt, messages=messages, tools=tools
        )
        if chat is not None:  # its record is the next one: no other step writes meanwhile
            chat.answered(reply, seq=len(self.journal.events))
        return reply

    async def _model_failed(self, exc: ModelError) -> None:
        """Journal a failed model call: ask again later, ask again now, or park the run."""
        state, rt, run_id = self.state, self.rt, self.journal.run_id
        usage = exc.usage if isinstance(exc.usage, Usage) else Usage()
        if isinstance(exc, ModelResponseError):
            failed = ModelFailed(kind="malformed", error=exc.reason, usage=usage)
            records: list[Event] = [failed]
            if state.model_failures + 1 >= MALFORMED_LIMIT:
                reason = (
                    f"the model's answer was malformed {state.model_failures + 1} times in a row; "
                    f"last: {exc.reason}"
                )
                records.append(Parked(reason=reason, cause="model"))
            log.warning("run %s: the model's answer is malformed: %s", run_id, exc.reason)
            await self._append(records)
            return
        if exc.transient:
            delay = exc.retry_after
            if delay is None:
                delay = MODEL_RETRY.delay(state.model_failures + 1, rt.jitter)
            retry_at = rt.clock() + delay
            log.warning(
                "run %s: model call failed (%s); asking again in %.1f s",
                run_id,
                exc.reason,
                delay,
                extra={"run_id": run_id},
            )
            await self._append(
                [ModelFailed(kind="transient", error=exc.reason, retry_at=retry_at, usage=usage)]
            )
            return
        log.error("run %s: the model refused the request: %s", run_id, exc.reason)
        await self._append(
            [Parked(reason=f"model {exc.model!r} refused the request: {exc.reason}", cause="model")]
        )

    def _starts_with_answer(self, uses: list[dict[str, Any]]) -> list[ToolStarted]:
        """The ``tool_started`` records to write in the same group as the model's answer.

        That saves one sync per call, and is done only where it changes nothing a person could
        tell: every call of the turn runs at once (a known tool, valid arguments, no approval,
        no timeout or retries of its own, within budget), each tool's policy makes running it
        again harmless (``rerun`` or ``idempotency_key``), and the supervisor is not stopping.
        If the process dies before such a call really ran, the resumed run finds it started
        without a result and runs it under that policy, as after any crash between a call's
        start and its result.
        """
        state, rt = self.state, self.rt
        if rt.stopping.is_set():
            return []
        starts: list[ToolStarted] = []
        for block in uses:
            spec = spec_for(state, rt, block["name"])
            if (
                spec is None
                or spec.approval
                or pinned_approval(state, block["name"])
                or spec.policy not in SAFE_TO_REPEAT
                or spec.timeout is not None
                or spec.retries
            ):
                return []
            try:
                spec.validate(block.get("input"))
            except ToolArgumentsError:
                return []
            starts.append(ToolStarted(call_id=block["id"], name=block["name"], attempt=1))
        if len({s.call_id for s in starts}) != len(starts):
            return []  # a malformed turn: let the usual path deal with it
        if starts and budget_problem(state, rt.clock(), for_model=False, starting=len(starts)):
            return []
        return starts

    # ------------------------------------------------------------------ tools

    async def _advance_calls(self) -> None:
        """Record what needs no tool run, then run every runnable call of the turn at once."""
        state, rt = self.state, self.rt
        now = rt.clock()
        records: list[Event] = []
        runs: list[tuple[Call, ToolSpec, Run | Verify]] = []
        later: list[tuple[Call, ToolSpec, RetryAt]] = []
        taken: set[str] = set()  # signals given to a call in this round: one call each
        for call in list(state.calls.values()):
            if call.done or call.escalated:
                continue
            spec = spec_for(state, rt, call.name)
            if spec is not None and call.id in self.prestarted:
                runs.append((call, spec, Run(call.attempts)))  # checked when its start went out
                continue
            step = next_step(state, call, spec, now)
            if isinstance(step, Record):
                signal = next((r.signal_id for r in step.records if isinstance(r, ToolResult)), "")
                if signal and signal in taken:
                    continue  # another call of the turn takes it; this one looks again
                taken.add(signal)
                records.extend(step.records)
            elif isinstance(step, Escalate):
                records.append(Escalated(call_id=call.id, reason=step.reason))
            elif isinstance(step, RetryAt):
                assert spec is not None
                later.append((call, spec, step))
            elif isinstance(step, (Run, Verify)):
                assert spec is not None
                runs.append((call, spec, step))
            else:
                assert isinstance(step, WaitForPerson | Rest)
        if records:
            await self._append(records)
            return  # decide again on what the records changed
        if not runs and later:
            # Nothing to do before the next retry time: wait for it, then run what is due.
            due = min(step.when for _, _, step in later)
            await self._pause_until(due)
            runs = [(c, spec, Run(step.attempt)) for c, spec, step in later if step.when <= due]
        if not runs:
            raise RuntimeError(
                f"run {self.journal.run_id!r}: the run is running but no call can advance"
            )
        self._check_stopping()
        starting = sum(1 for c, _, s in runs if isinstance(s, Run) and c.id not in self.prestarted)
        over = budget_problem(state, rt.clock(), for_model=False, starting=starting)
        if over is not None:
            await self._finish(RunStatus.FAILED, over)
            return
        counted = await self._enter_step()
        try:
            if len(runs) == 1:  # the common case: no task group to pay for
                await self._carry_out(*runs[0])
            else:
                async with anyio.create_task_group() as tg:
                    for call, spec, step in runs:
                        tg.start_soon(self._carry_out, call, spec, step)
        finally:
            if counted:
                rt.gate.leave_step()
        await self._catch_up()

    async def _carry_out(self, call: Call, spec: ToolSpec, step: Run | Verify) -> None:
        if isinstance(step, Run):
            await self._run_call(call, spec, step.attempt)
        else:
            await self._verify_call(call, spec, step)

    async def _run_call(self, call: Call, spec: ToolSpec, attempt: int) -> None:
        journal = self.journal
        if call.id in self.prestarted:  # its tool_started is durable already, and it has not run
            self.prestarted.discard(call.id)
            dangling, seq = False, started_seq(self.journal, call.id) if self.trace else -1
        else:
            dangling = call.dangling  # the attempt before this one never ended
            (started,) = await journal.append(
                [ToolStarted(call_id=call.id, name=call.name, attempt=attempt)]
            )
            seq = started.seq
        failpoint("tool_started")
        await journal.fence()  # a worker paused past its lease must not act for the run any more
        ctx = ToolContext(run_id=journal.run_id, call_id=call.id, attempt=attempt)
        with tool_scope(self.trace, call, spec, attempt, seq=seq, dangling=dangling) as traced:
            outcome = await run_attempt(call, spec, ctx, clock=self.rt.clock, jitter=self.rt.jitter)
            failpoint("tool_returned")
            (saved,) = await journal.append([outcome])
            if traced is not None:
                traced.ended(saved, seq=saved.seq)
        failpoint("result_saved")
        if isinstance(outcome, Waiting) and outcome.child is not None:
            await self.rt.start_child(self.state, outcome)  # once the wait for it is durable

    async def _verify_call(self, call: Call, spec: ToolSpec, step: Verify) -> None:
        journal = self.journal
        await journal.fence()
        ctx = ToolContext(run_id=journal.run_id, call_id=call.id, attempt=call.attempts)
        seq = started_seq(self.journal, call.id) if self.trace else -1
        with tool_scope(self.trace, call, spec, call.attempts, seq=seq, dangling=True, verify=True):
            try:
                landed = await spec.check_landed(call.input, ctx)
            except anyio.get_cancelled_exc_class():
                if cancelled_from_outside():
                    raise
                landed, problem = None, "the verify function raised CancelledError"
            except BaseException as exc:  # that call's error, never its siblings' cancellation
                landed, problem = None, f"verify failed: {type(exc).__name__}: {exc}"
            else:
                problem = ""
        if problem:
            await journal.append([error_result(call, problem)])
        elif landed is not None:
            await journal.append([ok_result(call, landed, call.attempts, journal.run_id)])
        elif step.then_run:
            await self._run_call(call, spec, call.attempts + 1)
            return
        else:
            await journal.append([error_result(call, step.otherwise)])
        failpoint("result_saved")

    # ------------------------------------------------------------------ plumbing

    async def _fold_inbox(self) -> bool:
        """Record the answers people queued while this process held the journal.

        Looked at when a drive resumes a run and whenever the run is about to rest (not at
        every step, nor when a just-created run starts: a ``stat`` there is measurable), so a
        queued answer takes effect at the run's next pause. Returns whether any answer was
        recorded.
        """
        mailbox = self.rt.mailbox
        run_id = self.journal.run_id
        if mailbox is None or not await mailbox.has_inbox(run_id):
            return False
        answers = await mailbox.take_inbox(run_id)
        recorded = False
        for answer in answers:
            problem = answer_problem(self.state, answer, self.rt.clock())
            if problem is None and repeated(self.state, answer):
                continue  # a signal delivered twice while the run was held
            if problem is None:
                await self._append([answer])
                recorded = True
            else:
                log.warning("run %s: ignored a queued answer: %s", run_id, problem)
        failpoint("inbox_folded")  # a crash here leaves them in both: the check above copes
        await mailbox.clear_inbox(run_id, len(answers))
        return recorded

    async def _look_at_children(self) -> bool:
        """For each call waiting for a child run: record its end if it has ended, or start it
        if it does not exist (its creator stopped between journaling the wait and creating it).

        A child's own supervisor records the end in this run as soon as the child ends; this
        look covers a process that died in between. Returns whether an end was recorded.
        """
        state, rt = self.state, self.rt
        recorded = False
        for call in list(state.calls.values()):
            wait = call.wait
            if wait is None or wait.child is None:
                continue
            child = str(wait.child["run_id"])
            if child in state.children:
                continue
            try:
                events = await rt.read_run(child)
            except RunNotFoundError:
                await rt.start_child(state, wait)
                continue
            ended = child_ended(call.id, fold(events))
            if ended is not None:
                await self._append([ended])
                recorded = True
        return recorded

    async def _pause_until(self, when: float) -> None:
        """Wait until wall-clock ``when``; stop waiting (``Suspend``) if the supervisor stops."""
        rt = self.rt
        self._check_stopping()
        await sleep_unless(rt.stopping, rt.sleep, when - rt.clock())
        self._check_stopping()

    def _check_stopping(self) -> None:
        if self.rt.stopping.is_set():
            raise Suspend

    async def _enter_step(self) -> bool:
        """Pass the gate (count a step in, unless this run holds it alone) and record the
        interruption this drive resumed from, if not yet; returns whether a step was counted.
        """
        counted = False
        if not self.holds_gate:
            await self.rt.gate.enter_step()
            counted = True
        if self.resume_record is not None:
            try:
                await self._append([])
            except BaseException:
                if counted:
                    self.rt.gate.leave_step()
                raise
        return counted

    async def _append(self, records: list[Event]) -> None:
        if self.resume_record is not None:  # the drive's first write: say what it resumed from
            records = [self.resume_record, *records]
            self.resume_record = None
        await self.journal.append(records)
        await self._catch_up()

    async def _catch_up(self) -> None:
        """Fold new durable events, with the content of any blob they refer to.

        Only the events not folded yet are looked at, so a step costs the same in a long run.
        """
        await _load_blobs(self.journal, self.rt, self.blobs, self.state.applied)
        self.state.catch_up(self.journal.events, self.blobs)

    async def _finish(self, status: RunStatus, reason: str) -> Outcome:
        await self._append([RunFinished(status=status.value, reason=reason)])
        return Outcome(status, reason)


async def _load_blobs(
    journal: JournalHandle, rt: Runtime, blobs: dict[str, Any], start: int = 0
) -> None:
    """Load every blob the journal's events from ``start`` on refer to that ``blobs`` lacks."""
    events = journal.events
    for event in events[start:] if start else events:
        ref = event.blob if isinstance(event, ToolResult) else None
        if ref is not None and ref.digest not in blobs:
            blobs[ref.digest] = await rt.load_blob(ref)
