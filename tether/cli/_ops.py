"""``tether approve|reject|resolve|cancel``: a person's answer, appended to a run's journal.

Each command opens the run for writing (a directory store: its journal under its exclusive lock;
PostgreSQL: a lease on the run), folds it, checks that the answer fits the run's current state,
and appends one record (``decision``, ``resolved`` or ``run_finished``). When a worker holds the
run, the answer is checked against what the run says so far and queued in its inbox instead.
The run itself continues when a supervisor next picks it up: a running ``tether worker``, or the
next process that enters a ``Supervisor`` on the store.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from .._errors import JournalLockedError, RunStateError
from ..journal._records import Decision, Event, Resolved, RunFinished
from ..supervisor._state import Call, RunState, RunStatus, fold
from ._view import as_json, awaits_approval, call_text, execute, open_store, shorten, using

CONTINUES = (
    "The run continues when a supervisor next picks it up (a running `tether worker`, or the "
    "next process that enters a Supervisor on this store)."
)

BUSY = (
    " If a worker is advancing the run (it holds the journal's lock, or the run's lease in "
    "PostgreSQL), the answer is checked against the run as recorded so far and queued in the "
    "run's inbox: that worker records it at its next pause. The store is a directory (--root) "
    "or a PostgreSQL database (--store URL). Exit 3 if the store cannot be read or reached."
)


def add_op_commands(commands: Any, add_store: Callable[[argparse.ArgumentParser], None]) -> None:
    for verb, approved in (("approve", True), ("reject", False)):
        effect = (
            "the call runs"
            if approved
            else "the call does not run; the model gets an error tool result carrying the note"
        )
        p = commands.add_parser(
            verb,
            help=f"{verb} a tool call that waits for approval",
            description=f"Record that NAME {verb}s tool call CALL of run RUN ({effect}). "
            "Refused (exit 1) unless the run exists and is not finished, the call belongs to "
            "the model's current turn, has not started or finished, is not escalated and has "
            "no decision yet." + BUSY + " " + CONTINUES + " Approval flags of tools are not "
            "in the journal: a call is taken to wait for approval when it has no record yet.",
        )
        add_store(p)
        p.add_argument("run", metavar="RUN", help="the run id")
        p.add_argument("call", metavar="CALL", help="the tool call id (see `tether show`)")
        p.add_argument("--by", metavar="NAME", required=True, help="who decides (recorded)")
        p.add_argument(
            "--note",
            metavar="TEXT",
            default="",
            help="why (recorded; a rejection's note is what the model reads)",
        )
        p.set_defaults(handler=_decide, approved=approved)

    resolve = commands.add_parser(
        "resolve",
        help="answer an escalated tool call (outcome unknown after a crash)",
        description="Record a person's answer to escalated call CALL of run RUN. "
        "'succeeded': the call did happen; --result is its result (JSON), recorded as the "
        "tool's result. 'retry': run it again (with the same idempotency key). 'failed': the "
        "model gets an error tool result (--result if given, else the note). Refused (exit 1) "
        "unless the call is escalated and not yet resolved, and the run is not finished."
        + BUSY
        + " "
        + CONTINUES,
    )
    add_store(resolve)
    resolve.add_argument("run", metavar="RUN", help="the run id")
    resolve.add_argument("call", metavar="CALL", help="the escalated tool call id")
    resolve.add_argument(
        "--outcome", required=True, choices=("succeeded", "retry", "failed"), help="the answer"
    )
    resolve.add_argument(
        "--result",
        metavar="JSON",
        help="the call's result as JSON (succeeded or failed; a bare word is not JSON: quote "
        "strings as '\"text\"')",
    )
    resolve.add_argument("--by", metavar="NAME", required=True, help="who resolves (recorded)")
    resolve.add_argument("--note", metavar="TEXT", default="", help="why (recorded)")
    resolve.set_defaults(handler=_resolve, parser=resolve)

    cancel = commands.add_parser(
        "cancel",
        help="end a run as cancelled",
        description="Append run_finished with status 'cancelled' to run RUN's journal: no "
        "supervisor will continue it. Refused (exit 1) if the run already finished." + BUSY,
    )
    add_store(cancel)
    cancel.add_argument("run", metavar="RUN", help="the run id")
    cancel.add_argument(
        "--reason", metavar="TEXT", default="cancelled", help="recorded reason (default: cancelled)"
    )
    cancel.set_defaults(handler=_cancel)


async def _append(
    args: argparse.Namespace, check: Callable[[RunState], Event]
) -> tuple[Event, RunState]:
    """Open the run for writing, build the record with ``check`` (which may refuse), append."""
    async with using(open_store(args), write=True) as store:
        try:
            journal = await store.open(args.run)
        except JournalLockedError:
            # A worker is advancing the run (its journal's lock, or a live lease): check against
            # what the run says so far and queue the answer in the run's inbox; the worker
            # records it at its next pause.
            state = fold(await store.read(args.run))
            if state.finished is not None:
                raise RunStateError(
                    args.run, f"run already finished ({state.finished.status})"
                ) from None
            record = check(state)
            await store.post(args.run, record)
            return record, state
        async with journal:
            state = fold(journal.events)
            if state.finished is not None:
                raise RunStateError(args.run, f"run already finished ({state.finished.status})")
            record = check(state)
            (written,) = await journal.append([record])
    return written, state


def _where(record: Event) -> str:
    """Where the answer went: the journal (with its seq) or the run's inbox."""
    if record.seq >= 0:
        return f"(seq {record.seq})"
    return "(queued: another process is advancing the run and records it at its next pause)"


def _call(state: RunState, run_id: str, call_id: str) -> Call:
    call = state.calls.get(call_id)
    if call is None:
        turn = ", ".join(f"{c.id} ({c.name})" for c in state.calls.values()) or "none"
        raise RunStateError(
            run_id, f"call {call_id!r} is not in the model's current turn (calls there: {turn})"
        )
    if call.done:
        raise RunStateError(run_id, f"call {call_id!r} ({call.name}) already has its result")
    return call


def _decide(args: argparse.Namespace) -> int:
    verb = "approved" if args.approved else "rejected"

    def check(state: RunState) -> Event:
        call = _call(state, args.run, args.call)
        if call.escalated:
            raise RunStateError(
                args.run, f"call {args.call!r} is escalated; answer it with `tether resolve`"
            )
        if call.decision is not None:
            d = call.decision
            was = "approved" if d.approved else "rejected"
            raise RunStateError(args.run, f"call {args.call!r} was already {was} by {d.by}")
        if not awaits_approval(state, args.call):
            raise RunStateError(
                args.run,
                f"call {args.call!r} ({call.name}) is not waiting for approval "
                f"(started {call.attempts} time(s))",
            )
        return Decision(call_id=args.call, approved=args.approved, by=args.by, note=args.note)

    async def command() -> int:
        record, state = await _append(args, check)
        call = state.calls[args.call]
        note = f" ({shorten(args.note, 80)})" if args.note else ""
        print(
            f"recorded: {verb} {args.call} {_call_text(call)} of run {args.run} by {args.by}"
            f"{note} {_where(record)}"
        )
        print(CONTINUES)
        return 0

    return execute(args, command)


def _resolve(args: argparse.Namespace) -> int:
    result: Any = None
    if args.result is not None:
        if args.outcome == "retry":
            args.parser.error("--result does not apply to --outcome retry")
        try:
            result = json.loads(args.result)
        except json.JSONDecodeError as exc:
            args.parser.error(f"--result is not valid JSON: {exc}")

    def check(state: RunState) -> Event:
        call = _call(state, args.run, args.call)
        if not call.escalated:
            why = (
                "was already resolved"
                if call.resolution is not None
                else "is not escalated (approve or reject calls that wait for approval)"
            )
            raise RunStateError(args.run, f"call {args.call!r} ({call.name}) {why}")
        return Resolved(
            call_id=args.call, outcome=args.outcome, result=result, by=args.by, note=args.note
        )

    async def command() -> int:
        record, state = await _append(args, check)
        call = state.calls[args.call]
        extra = f", result {shorten(as_json(result), 80)}" if result is not None else ""
        note = f" ({shorten(args.note, 80)})" if args.note else ""
        print(
            f"recorded: resolved {args.call} {_call_text(call)} of run {args.run} as "
            f"{args.outcome}{extra} by {args.by}{note} {_where(record)}"
        )
        print(CONTINUES)
        return 0

    return execute(args, command)


def _cancel(args: argparse.Namespace) -> int:
    def check(state: RunState) -> Event:
        return RunFinished(status=RunStatus.CANCELLED.value, reason=args.reason)

    async def command() -> int:
        record, _ = await _append(args, check)
        print(f"recorded: run {args.run} cancelled ({args.reason}) {_where(record)}")
        return 0

    return execute(args, command)


def _call_text(call: Call) -> str:
    return call_text(call.name, call.input, 60)
