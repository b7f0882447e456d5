"""What a person is told of an answer they gave: one sentence, the same in every front end.

``tether approve`` and the other operator commands print it, the web console shows it as its
flash and the JSON API returns it as ``message``. It says exactly what happened, no more: an
answer appended to the journal is ``recorded`` (with its ``seq``); one queued for a run another
process holds is ``queued``, with what that process will do with it (check it again and record
it at the run's next pause; for a cancellation, stop the run within about a second; for a
resolution of a call that waits for its service, record it only if the call still waits for its
service then), or
queued behind answers that wait in the inbox of a run whose holder stopped before recording
them (``queued behind ...``: the next process records them all, in order); a signal
the run already had is ``already recorded``, and one already waiting in its inbox ``already
queued`` (still to be checked and recorded, or refused, by the process that holds the run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .._errors import RunRecordsError
from ..journal import AnyEvent, Decision, Event, Repinned, Resolved, Retried, RunFinished, Signal
from ._describe import as_json, call_text, shorten

if TYPE_CHECKING:
    from ..supervisor import RunState
    from ..supervisor._verbs import Recorded

QUEUED = "queued: another process is advancing the run; it will"
NEXT_PAUSE = f"{QUEUED} check this answer again and record it at the run's next pause"
BEHIND = (
    "queued behind the answers waiting in the run's inbox (given while a process held it, "
    "which stopped before it recorded them): the process that takes the run up next will check "
    "them and this one again, in order, and record them"
)
FOR_SERVICE = (
    f"{QUEUED} check this answer again at the run's next pause and record it only if the call "
    "still waits for its service then (tried again meanwhile, the answer is dropped)"
)
STOPS = (
    f"{QUEUED} stop the run within about a second (a call in flight is cancelled and recorded "
    "as interrupted, no new call starts) and record"
)


def acknowledgement(run_id: str, done: Recorded) -> str:
    """The sentence that tells a person what became of their answer ``done`` to run
    ``run_id``."""
    what = answer_text(run_id, done)
    if done.repeated and done.pending:
        return (
            f"already queued: {what}; delivered again, it counts once: another process is "
            "advancing the run; it will check the signal again and record it at the run's next "
            "pause"
        )
    if done.repeated:
        return f"already recorded: {what}; delivered again, it counts once" + _other_payload(done)
    return _sentence(done, what) + _children(done)


def retry_details(done: Recorded) -> list[str]:
    """For a retry: what the run had stopped with, and its budgets from now on, if it was
    given new ones (the lines the command line prints after the sentence, and the console
    adds to it)."""
    record, state = done.record, done.state
    if not isinstance(record, Retried):
        return []
    was = (
        f"failed: {state.finished.reason}"
        if state.finished is not None
        else (state.parked.reason if state.parked is not None else "")
    )
    lines = [f"it had stopped with: {shorten(was, 160)}"] if was else []
    if record.budgets is not None:
        lines.append(f"budgets from now on: {as_json(msgspec.to_builtins(record.budgets))}")
    return lines


def _sentence(done: Recorded, what: str) -> str:
    record = done.record
    if done.queued and done.behind:
        return f"{BEHIND}: {what}"
    if done.queued and isinstance(record, Resolved) and record.attempts is not None:
        return f"{FOR_SERVICE}: {what}"  # (only if the call still waits for its service)
    if done.queued:
        return f"{STOPS if isinstance(record, RunFinished) else NEXT_PAUSE}: {what}"
    return f"recorded: {what} (seq {record.seq})"


def _other_payload(done: Recorded) -> str:
    """For a signal delivered again with another payload than the recorded one: that the
    recorded one stands (the new one is not recorded)."""
    record = done.record
    if not isinstance(record, Signal):
        return ""
    kept = done.state.signals.get(record.signal_id)
    if kept is None or kept.payload == record.payload:
        return ""
    recorded = shorten(as_json(kept.payload), 80)
    return f" (its payload differs from the recorded one, {recorded}, which stands)"


def _children(done: Recorded) -> str:
    """What became of the cancellations of a cancelled run's children, if any."""
    if not done.children:
        return ""
    told = [
        f"{run_id} ({'queued' if child.queued else 'recorded'})" for run_id, child in done.children
    ]
    return f"; its child runs cancelled too: {', '.join(told)}"


def unfoldable(run_id: str, problem: RunRecordsError) -> str:
    """What a person is told of an answer to a run whose journal is intact but whose records
    do not make a run (``RunRecordsError``): refused, nothing recorded, and where to look."""
    return (
        f"run {run_id!r}: its journal's records do not make a run ({problem}); nothing was "
        "recorded (`tether journal dump` shows them)"
    )


def answer_text(run_id: str, done: Recorded) -> str:
    """The answer in words: ``approved toolu_03 reply(...) of run R by priya (note)``."""
    return answer_words(run_id, done.record, done.state, repeated=done.repeated)


def answer_words(
    run_id: str, record: Event | AnyEvent, state: RunState, *, repeated: bool = False
) -> str:
    """``record``, an answer to run ``run_id`` (whose state names its calls), in words; a
    signal delivered again (``repeated``) is not said to be anyone's."""
    if isinstance(record, Decision | Resolved):
        call = state.calls.get(record.call_id)
        what = f" {call_text(call.name, call.input, 60)}" if call is not None else ""
        if isinstance(record, Decision):
            verb = "approved" if record.approved else "rejected"
            head = f"{verb} {record.call_id}{what} of run {run_id}"
        else:
            result = (
                f", result {shorten(as_json(record.result), 80)}"
                if record.result is not None
                else ""
            )
            head = f"resolved {record.call_id}{what} of run {run_id} as {record.outcome}{result}"
        return f"{head} by {record.by}{_note(record.note)}"
    if isinstance(record, Retried):
        return f"retry of run {run_id} by {record.by}{_note(record.note)}"
    if isinstance(record, Signal):
        by = f" by {record.by}" if record.by and not repeated else ""
        return f"signal {record.name} ({record.signal_id}) to run {run_id}{by}"
    if isinstance(record, RunFinished):
        return f"run {run_id} cancelled: {record.reason}"
    if isinstance(record, Repinned):
        pins = [f"{p.name} v{p.version} ({p.schema_hash[:12]})" for p in record.tools]
        if record.model is not None:
            pins.append(f"model {record.model}")
        return f"repin of run {run_id} to {', '.join(pins)} by {record.by}{_note(record.note)}"
    return f"{type(record).__name__} for run {run_id}"


def _note(note: str) -> str:
    return f" ({shorten(note, 80)})" if note else ""
