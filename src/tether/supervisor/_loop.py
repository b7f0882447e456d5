"""The one agent loop: replay the journal, decide the next step from the state, act, record.

A fresh run and a resumed run go through exactly this code (docs/design.md invariant 4). Every step
writes its intent before acting and its outcome before the next decision:

- the model's answer (with its tool calls and their ids) is durable before any tool runs;
- a ``tool_started`` record is durable before the tool runs;
- a tool's result is durable before the model is called again.

The decisions live elsewhere, one place each: whether the run rests and why
(``_status.run_status``), what happens to each tool call (``_replay.next_step``, gathered for
a turn by ``plan_turn``), what a model's answer or failure decides (``_reply``), whether a
resume counts as an interruption and when a crash loop parks the run (``_resume``), budgets
(``_budgets``), one tool attempt (``_attempt``), queued answers (``_answers.fold_inbox``),
child runs (``_children``). This module carries their answers out, and keeps a run's life
apart from its process's: a graceful stop leaves a ``suspended`` record, a model that fails
transiently is asked again within the run, and one that refuses for good parks the run for a
person instead of failing it (docs/design.md invariant 9).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import anyio

from .._backoff import sleep_unless
from .._errors import LeaseLostError, ModelError
from .._failpoints import failpoint
from ..journal import (
    Event,
    JournalHandle,
    ModelResponse,
    Parked,
    Resumed,
    RunFinished,
    Suspended,
    ToolStarted,
    Waiting,
)
from ..models import blocks_of, text_sink, tool_uses
from ..models._transcript import freeze_conversation
from ..tools import ToolContext, ToolSpec
from ._answers import fold_inbox
from ._attempt import abandoned, interrupted, never_run
from ._attempt import attempt as run_attempt
from ._attempt import verify as verify_landed
from ._budgets import budget_problem
from ._children import look_at_children
from ._manifest import CONTRACT, contract_decision, contract_found, system_of
from ._manifest import build_manifest as build_manifest
from ._manifest import manifest_problem as manifest_problem
from ._replay import RetryAt, Run, Verify, plan_turn
from ._reply import act_on_stop, model_failed, safe_call_ids, starts_with_answer
from ._resume import resumed, stopped_mid_work, was_interrupted
from ._runtime import Interruption as Interruption
from ._runtime import LeftForAnother, Suspend, definitions, load_blobs, spec_for
from ._runtime import Runtime as Runtime
from ._state import Call, RunState, RunStatus, fold
from ._status import Standing, run_deadline, run_status
from ._telemetry import ChatTelemetry, DriveTelemetry
from ._traced import chat_scope, open_drive, tool_scope

log = logging.getLogger("tether.supervisor")

SUSPEND_TIMEOUT = 5.0
"""Seconds a cancelled run may take to record that it was suspended (best effort)."""
SETTLE_POLL = 0.005
"""Seconds between looks at a journal whose last append, cut short, is still landing."""
SETTLE_TIMEOUT = SUSPEND_TIMEOUT / 2
"""How long a stopping drive waits for its appends in flight to land: half of what it has to
stop in, so that what it then records still has time to be written."""


async def drive(
    journal: JournalHandle,
    rt: Runtime,
    *,
    fresh: bool,
    prior: Interruption | None = None,
    alone: bool = False,
) -> Standing | None:
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
        LeaseLostError: the handle lost the right to act for the run (``when_lost``) while the
            drive went on: every call still running was cancelled at once and nothing more
            was recorded; the run belongs to whichever worker holds it now.

    On cancellation: stops at the next await and records ``suspended`` (shielded, best
    effort); everything recorded so far is durable and the run resumes from there.
    """
    stepper = _Drive(journal, rt, alone=alone)
    lost = anyio.CancelScope()  # cancelled when the handle may no longer act for the run
    journal.when_lost(lost.cancel)
    with lost:
        return await _drive(stepper, fresh=fresh, prior=prior)
    # The calls still running for it were stopped, and nothing more recorded: the handle's
    # fence says why (another worker took the run, or the lease ran out).
    await journal.fence()
    raise LeaseLostError(journal.path, "this process may no longer act for the run")


async def _drive(stepper: _Drive, *, fresh: bool, prior: Interruption | None) -> Standing | None:
    journal, rt = stepper.journal, stepper.rt
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
            if journal.run_id in rt.halting:  # a person cancelled the run: stop it now
                await stepper.halt()
            else:
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
        await load_blobs(self.rt, self.journal.events, self.blobs)
        self.state = fold(self.journal.events, self.blobs)
        if self.state.started is None:
            raise ValueError(f"run {self.journal.run_id!r} has no run_started record")

    async def run(self, *, fresh: bool, prior: Interruption | None) -> Standing:
        state, rt = self.state, self.rt
        if state.finished is not None:
            # A signal posted just before the run finished, its post landing after the last
            # look, is kept (see ``fold_inbox``); any other answer is logged and dropped.
            await self._fold_inbox(look=True)
            return run_status(state, rt.clock())
        problem, takeover = contract_decision(state, rt)
        if problem is not None:
            taker = await rt.taker(state.manifest)
            if taker is not None:  # a rolling deploy: a worker that has its contract is live
                raise LeftForAnother(taker)
            return await self._park_for_contract(problem)
        if takeover is not None:  # tools that changed compatibly: the run goes on under them
            log.info("run %s: %s", state.run_id, takeover.note, extra={"run_id": state.run_id})
            await self._append([takeover])
            failpoint("contract_taken")
        if state.parked is not None and state.parked.cause == CONTRACT:
            # Parked by a process that lacked the run's contract; this one has it.
            await self._append([contract_found(rt)])
            failpoint("contract_taken")
        if not fresh and was_interrupted(state, rt.clock()):
            parked = await self._resumed(prior)
            if parked is not None:
                return parked
        if self.alone:
            await rt.gate.enter_alone()
            self.holds_gate = True
        if not fresh:  # a run created just now has no call an answer could be for yet
            await self._fold_inbox(look=True)  # (a sweep may have resumed it for its inbox)
        while True:
            outcome = run_status(state, rt.clock())
            if outcome.status is not RunStatus.RUNNING and await self._fold_inbox():
                continue  # answers queued while this process held the journal: act on them
            if outcome.status is RunStatus.SLEEPING and await look_at_children(
                state, rt, self._append
            ):
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

    async def _park_for_contract(self, problem: str) -> Standing:
        """Park the run because this process cannot honour what it pinned, and say so in its
        journal (once), so that every view shows why and what to do."""
        state = self.state
        if state.parked is None or state.parked.reason != problem:
            log.warning(
                "run %s parked: %s",
                self.journal.run_id,
                problem,
                extra={"run_id": self.journal.run_id},
            )
            await self._append([Parked(reason=problem, cause=CONTRACT)])
        return run_status(state, self.rt.clock())

    async def _resumed(self, prior: Interruption | None) -> Standing | None:
        """Count the interruption; park the run at once if it is the latest of a crash loop.

        Otherwise its ``resumed`` record waits for the run's first step (``_enter_step``): a
        run that never gets to act in this process (it waits behind a suspect running alone,
        say) is not charged if the process dies meanwhile, since it was not running then.
        """
        journal = self.journal
        if prior is None and journal.lapsed:
            # This worker's own lease ran out under it (a pause, a starved loop, a cut-off
            # store): not the run's doing, so not a crash to charge it with.
            prior = Interruption("lease ran out: this worker was paused or cut off", charged=False)
        record, parking = resumed(
            journal.run_id, self.state, self.rt, prior, taken_from=journal.taken_from
        )
        if not parking:
            self.resume_record = record
            return None
        await self._append([record, *parking])
        return run_status(self.state, self.rt.clock())

    async def halt(self) -> None:
        """Stop for a person's cancellation (best effort: never raises): record each call in
        flight as interrupted (``_attempt.interrupted``), then take the queued answers in, the
        cancellation among them when another process sent it (a supervisor's own cancel
        records it once this drive has ended)."""
        journal, state = self.journal, self.state
        if journal.broken:
            return
        await self._settle()  # the drive's own cancellation may be landing, say
        try:
            await self._catch_up()  # calls started since the last fold (their tool_started)
        except Exception as exc:
            log.warning("run %s: could not record the cancellation: %s", journal.run_id, exc)
            return
        # A run that ended meanwhile (its drive took the cancellation in, or failed it for a
        # deadline, while this halt came) gets nothing more after its ``run_finished``.
        records = [] if state.finished is not None else interrupted(state, self.prestarted)
        self.prestarted.clear()
        if stopped_mid_work(state, self.rt.clock()):
            records.append(
                Suspended(reason="stopped for a cancellation", host=self.rt.host, pid=os.getpid())
            )
        try:
            if records:
                await self._append(records)
            await self._fold_inbox(cascade=False)
        except Exception as exc:  # a broken handle or a lost lease: the next owner sees it
            log.warning("run %s: could not record the cancellation: %s", journal.run_id, exc)

    async def suspend(self, reason: str) -> None:
        """Record that this owner stopped on purpose (best effort: never raises).

        The stop is judged on the journal once every append in flight has landed (a
        ``resumed`` record in flight, say, must be followed by ``suspended``, or the next
        owner counts a crash).
        """
        journal = self.journal
        await self._settle()
        try:
            await self._catch_up()
        except Exception as exc:  # (a blob that cannot be read: judge on what is folded)
            log.debug("run %s: could not fold its last events: %s", journal.run_id, exc)
        if journal.broken or not stopped_mid_work(self.state, self.rt.clock()):
            return
        try:
            suspended = Suspended(
                reason=reason, host=self.rt.host, pid=os.getpid(), at=self.rt.clock()
            )
            await journal.append([suspended])
        except Exception as exc:  # a broken handle or a lost lease: the next owner charges it
            log.debug("run %s: could not record the suspension: %s", journal.run_id, exc)

    async def _settle(self) -> None:
        """Wait for the groups whose append's wait a cancellation cut short: they may still
        land, and what a stopping drive records must come after them (never a ``suspended``
        after the run's ``run_finished``, say)."""
        journal = self.journal
        with anyio.move_on_after(SETTLE_TIMEOUT) as settling:
            journal.when_lost(settling.cancel)  # (a lost handle records nothing more anyway)
            # A handle tells of a group that lands after its wait was cut short only by its
            # ``events``: looked at for the few milliseconds of a sync, and only then.
            while len(journal.events) < journal.next_seq and not journal.broken:  # noqa: ASYNC110
                await anyio.sleep(SETTLE_POLL)

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
        if await self._cancelled_meanwhile():
            return
        tools = definitions(rt, state.manifest)
        if rt.frozen_messages:  # one read-only copy of each message, the run's and the model's
            freeze_conversation(state.messages)
        # A new list, so a model that appends to it cannot touch the run's state; the messages
        # themselves are shared (the Model protocol forbids changing them): copying each one
        # at every call made a step's cost grow with the run's length.
        messages = list(state.messages)
        counted = await self._enter_step()
        token = None if rt.on_text is None else text_sink.set(partial(rt.on_text, state.run_id))
        failed: ModelError | None = None
        system = system_of(state.manifest)
        # The model is awaited here, not in a coroutine of its own: with many runs in flight,
        # every object a step holds across an await is one the cyclic collector meets.
        try:
            if rt.model_gate is not None:
                async with rt.model_gate:
                    self._check_stopping()
                    with chat_scope(self.trace, state, messages) as chat:
                        reply = await rt.model(system=system, messages=messages, tools=tools)
                        self._answered(chat, reply)
            else:
                with chat_scope(self.trace, state, messages) as chat:
                    reply = await rt.model(system=system, messages=messages, tools=tools)
                    self._answered(chat, reply)
        except ModelError as exc:
            failed = exc
        finally:
            if token is not None:
                text_sink.reset(token)
            if counted:
                rt.gate.leave_step()
        del messages, tools  # not held while the answer's records sync
        if failed is not None:  # ask again later, ask again now, or park the run
            await self._append(model_failed(state, rt, self.journal.run_id, failed))
            return
        failpoint("model_answered")
        message = reply.as_message()
        safe_call_ids(message, state, self.journal.run_id)
        records: list[Event] = [
            ModelResponse(
                message=cast("dict[str, Any]", message),  # a Message is the record's JSON dict
                usage=reply.usage,
                stop_reason=reply.stop_reason,
                stop_details=reply.stop_details,
                response_id=reply.response_id,
            )
        ]
        blocks = blocks_of(message)
        uses = tool_uses(blocks)
        settled = act_on_stop(
            reply.stop_reason, uses, blocks=blocks, stop_details=reply.stop_details
        )
        starts = [] if settled else starts_with_answer(state, rt, uses)
        del reply, uses, blocks
        records += settled
        records += starts
        await self._append(records)
        self.prestarted.update(s.call_id for s in starts)
        failpoint("model_saved")

    def _answered(self, chat: ChatTelemetry | None, reply: Any) -> None:
        if chat is not None:  # its record is the next one: no other step writes meanwhile
            chat.answered(reply, seq=len(self.journal.events))

    # ------------------------------------------------------------------ tools

    async def _advance_calls(self) -> None:
        """Record what needs no tool run, then run every runnable call of the turn at once."""
        state, rt = self.state, self.rt
        pending = self.resume_record  # (not journaled yet: written with these records)
        turn = plan_turn(
            state,
            partial(spec_for, state, rt),
            self.prestarted,
            rt.clock(),
            taken_from=pending.taken_from if pending is not None else "",
        )
        runs, later = turn.runs, turn.later
        if turn.records:
            await self._append(turn.records)
            return  # decide again on what the records changed
        if not runs and later:
            # Nothing to do before the next retry time: wait for it, then run what is due.
            due = min(step.when for _, _, step in later)
            await self._pause_until(due)
            runs = _due(later, due)
        if not runs:
            raise RuntimeError(
                f"run {self.journal.run_id!r}: the run is running but no call can advance"
            )
        if any(c.unreached is not None for c, _, _ in runs) and await self._fold_inbox():
            # A person may have answered a call that waits for its service (a resolution
            # queued while a sibling ran): taken in before the call is tried again, so that
            # it answers the wait it was given for. (Cheap: a run with no inbox is not looked
            # at.)
            return  # decide again on what the answers changed
        # Nothing of the plan but its runs is held while the calls run (and no closure over
        # this frame's variables: each would be a cell the cyclic collector meets in flight).
        del turn, later
        self._check_stopping()
        if await self._cancelled_meanwhile():
            return
        starting = _starting(runs, self.prestarted)
        over = budget_problem(state, rt.clock(), for_model=False, starting=starting)
        if over is not None:
            await self._finish(RunStatus.FAILED, over)
            return
        counted = await self._enter_step()
        try:
            if len(runs) == 1:  # the common case: no task group (nor a coroutine) to pay for
                call, spec, step = runs[0]
                del runs  # (not held while the call runs)
                if isinstance(step, Run):
                    await self._run_call(call, spec, step.attempt)
                else:
                    await self._verify_call(call, spec, step)
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
            dangling, seq = False, call.started_seq
        else:
            dangling = call.dangling  # the attempt before this one never ended
            self._check_call_record()
            record = ToolStarted(
                call_id=call.id, name=call.name, attempt=attempt, at=self.rt.clock()
            )
            (started,) = await journal.append([record])
            seq = started.seq
        failpoint("tool_started")
        await journal.fence()  # a worker paused past its lease must not act for the run any more
        ctx = ToolContext(run_id=journal.run_id, call_id=call.id, attempt=attempt, tool=spec.name)
        with tool_scope(self.trace, call, spec, attempt, seq=seq, dangling=dangling) as traced:
            outcome = await run_attempt(
                call, spec, ctx, clock=self.rt.wall_clock, jitter=self.rt.jitter
            )
            failpoint("tool_returned")
            self._check_call_record()
            (saved,) = await journal.append([outcome], at=self.rt.clock())
            if traced is not None:
                traced.ended(saved, seq=saved.seq)
        failpoint("result_saved")
        if isinstance(outcome, Waiting) and outcome.child is not None:
            await self.rt.start_child(self.state, outcome)  # once the wait for it is durable

    async def _verify_call(self, call: Call, spec: ToolSpec, step: Verify) -> None:
        journal = self.journal
        await journal.fence()
        ctx = ToolContext(
            run_id=journal.run_id, call_id=call.id, attempt=call.attempts, tool=spec.name
        )
        seq = call.started_seq
        with tool_scope(self.trace, call, spec, call.attempts, seq=seq, dangling=True, verify=True):
            result = await verify_landed(
                call,
                spec,
                ctx,
                then_run=step.then_run,
                otherwise=step.otherwise,
                run_id=ctx.run_id,
                now=self.rt.clock,
            )
        if result is None:  # it did not land: run it again
            await self._run_call(call, spec, call.attempts + 1)
            return
        self._check_call_record()
        await journal.append([result], at=self.rt.clock())
        failpoint("result_saved")

    # ------------------------------------------------------------------ plumbing

    async def _fold_inbox(self, *, cascade: bool = True, look: bool = False) -> bool:
        """Record the answers people queued while this process held the journal.

        Looked at when a drive resumes a run and whenever the run is about to rest, so a
        queued answer takes effect at the run's next pause; a cancellation sooner (see
        ``_cancelled_meanwhile``). Returns whether any answer was recorded. A cancellation
        recorded here goes on to the run's children (``cascade``: not from a drive being
        cancelled, whose time is short; its halter does it). Unless told to ``look``, a run
        that surely has no inbox (``Halts.no_inbox``) is not looked at.
        """
        rt, state = self.rt, self.state
        if not look and rt.no_inbox(self.journal.run_id):
            return False  # a look found none, and nothing was posted since
        unfinished = state.finished is None
        recorded = await fold_inbox(
            rt.mailbox, self.journal.run_id, state, self._append_answer, clock=rt.clock
        )
        finished = state.finished
        if cascade and unfinished and finished and finished.status == RunStatus.CANCELLED:
            await rt.cascade(state)
        return recorded

    async def _append_answer(self, records: list[Event]) -> None:
        """Record a queued answer; a cancellation first records the end of each call left in
        flight: that the calls started with the model's answer did not run (``never_run``),
        and, taken in as a run is resumed, that the calls its last process was running when
        it stopped ended with their outcome unknown (``abandoned``)."""
        if not any(isinstance(r, RunFinished) for r in records):
            await self._append(records)
            return
        state, started = self.state, self.prestarted
        await self._append([*never_run(state, started), *abandoned(state, started), *records])
        self.prestarted.clear()  # (only once recorded: a dropped cancellation leaves them to run)

    async def _cancelled_meanwhile(self) -> bool:
        """Before a model or tool call starts: take the queued answers in if a cancellation is
        among them (a cheap look, where the store has one: see ``Halts.queued``), and say
        whether the run is over. So no new call starts once a cancellation is queued."""
        if not await self.rt.cancel_queued(self.journal.run_id):
            return False
        await self._fold_inbox()
        return self.state.finished is not None

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
        await self.journal.append(records, at=self.rt.clock())
        await self._catch_up()

    def _check_call_record(self) -> None:
        """Before a tool call appends what it says about itself (straight to the journal: no
        coroutine of its own per record, which the cyclic collector would meet in flight).

        Calls of one step run side by side, so they neither fold (the step catches up once
        they are all over) nor can be a drive's first write: a call starts only after its step
        was entered, which wrote the record of what the drive resumed from (``_enter_step``).
        """
        if self.resume_record is not None:
            raise RuntimeError("a tool call's record would come before the drive's resume record")

    async def _catch_up(self) -> None:
        """Fold new durable events, with the content of any blob they refer to.

        Only the events not folded yet are looked at, so a step costs the same in a long run.
        """
        await load_blobs(self.rt, self.journal.events, self.blobs, self.state.applied)
        self.state.catch_up(self.journal.events, self.blobs)

    async def _finish(self, status: RunStatus, reason: str) -> Standing:
        await self._append([RunFinished(status=status.value, reason=reason)])
        return Standing(status, reason)


def _due(
    later: list[tuple[Call, ToolSpec, RetryAt]], due: float
) -> list[tuple[Call, ToolSpec, Run | Verify]]:
    """The calls of ``later`` whose retry time has come by ``due``, as runs of their attempt."""
    return [(c, spec, Run(step.attempt)) for c, spec, step in later if step.when <= due]


def _starting(runs: list[tuple[Call, ToolSpec, Run | Verify]], prestarted: set[str]) -> int:
    """How many of ``runs`` start an attempt not started yet (what a tool-call budget counts)."""
    return sum(1 for c, _, s in runs if isinstance(s, Run) and c.id not in prestarted)
