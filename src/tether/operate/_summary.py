"""A run as a person sees it, from its journal alone: status, counters, what it waits for.

``tether runs``, ``tether show``, ``tether gc`` and the console all summarize runs here. No
application is loaded: a run's status is what ``tether.supervisor.run_status`` reads from its
journal, the same function the supervisor uses, with the approval flags and deadlines the
run's manifest pinned.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from .._errors import InvalidRunIdError, JournalError, RunNotFoundError, RunRecordsError
from ..journal import AnyEvent, FileStore, Store
from ..supervisor import RunState, RunStatus, fold, run_status
from ..supervisor._status import approval_deadline, approval_wait, world_wait
from ._acknowledge import answer_words
from ._holders import holder_of

WaitKind = Literal["approval", "resolution"]


@dataclass(frozen=True)
class Question:
    """One call a person has to answer."""

    call_id: str
    tool: str
    kind: WaitKind
    since: float
    reason: str = ""
    deadline: float | None = field(default=None, compare=False)
    """When an approval's wait ends by the contract its run pinned (``None``: no deadline)."""

    def describe(self) -> str:
        return f"{self.call_id} {self.tool}" + (f" ({self.reason})" if self.reason else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "awaiting": self.kind,
            "since": self.since,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Rest:
    """One call waiting for the world: a time, a named event, a child run, or its tool's
    service that could not be reached (``service``)."""

    call_id: str
    tool: str
    kind: Literal["time", "event", "child", "service"]
    what: str
    until: float | None = None
    event: str | None = None
    child: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "awaiting": self.kind,
            "what": self.what,
            "until": self.until,
            "event": self.event,
            "child": self.child,
        }


PARKED_ACTIONS = {
    "contract": (
        "deploy a worker that has the run's pinned contract (roll back, or register the old "
        "version beside the new) and it continues by itself; or let it go on under the new "
        "one: `tether repin {run} --app MODULE:FACTORY --by NAME` (`tether check` shows what "
        "changed)"
    ),
    "model": (
        "fix what made the model's calls fail (its key, the request, or the answers it sends: "
        "the reason says which), then `tether retry {run}`"
    ),
    "crash_loop": (
        "find why its process keeps stopping (the worker's log), then `tether retry {run}`"
    ),
}
"""What a person can do about a run the runtime parked, by the ``parked`` record's cause
(``{run}``: the run, with the options that name its store where they are known)."""


def parked_action(cause: str, run: str = "RUN") -> str:
    """What a person can do about a run parked for ``cause``; the commands name ``run`` (the
    run's id, after the store's options where the caller knows them: ``tether show``)."""
    action = PARKED_ACTIONS.get(cause, "`tether retry {run}` once the cause is fixed")
    return action.replace("{run}", run)


@dataclass(frozen=True)
class RunSummary:
    """A run as the operator commands report it."""

    run_id: str
    status: str
    reason: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    last_at: float | None = None
    model_calls: int = 0
    tool_calls: int = 0
    restarts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    events: int = 0
    questions: tuple[Question, ...] = ()
    final_text: str | None = None
    held_by: int | str | None = None
    readable: bool = True
    parent: str | None = None
    rests: tuple[Rest, ...] = ()
    model: str = ""
    tools: tuple[tuple[str, str], ...] = ()
    """The model and ``(tool, version)`` the run goes by now (as it started, or repinned)."""
    action: str = ""
    """What a person can do about a run the runtime parked (``needs_attention``), else ``""``."""
    retrying: str = ""
    """While a run's model calls fail (an outage, a rate limit): the last failure and when the
    model is asked again, in words (``""`` otherwise)."""
    queued: tuple[str, ...] = ()
    """The answers waiting in the run's inbox that its holder will record (each in words, in
    order): given while a process held the run, not in its journal yet. The calls they
    answer are not among ``questions`` (nor the events they bring among ``rests``)."""
    state: RunState | None = field(default=None, repr=False, compare=False)
    changes_at: float | None = field(default=None, compare=False)
    """When the status changes by itself (an approval deadline, the run's deadline, a timer),
    if it does: a summary stays true until then or until the run is written to."""

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def age(self, now: float) -> float | None:
        """Seconds since the run started."""
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def detail(self) -> str:
        """What the run waits for, or why it stopped, in one line."""
        parts: list[str] = []
        for kind in ("approval", "resolution"):
            calls = [w for w in self.questions if w.kind == kind]
            if calls:
                parts.append(f"awaiting {kind}: " + ", ".join(w.describe() for w in calls))
        if self.retrying:
            parts.append(self.retrying)
        if self.queued:
            parts.append("queued in its inbox: " + "; ".join(self.queued))
        if self.held_by is not None and not self.finished:
            parts.append(_holder_text(self.held_by))
        elif self.status == RunStatus.RUNNING and self.readable:
            parts.append("no process holds it: continues when a supervisor picks it up")
        if self.reason and not self.questions and self.status != RunStatus.DONE:
            parts.append(self.reason)
        if self.action:
            parts.append(self.action)
        if self.parent is not None:
            parts.append(f"child of {self.parent}")
        return "; ".join(parts)

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "waiting": [w.as_dict() for w in self.questions] + [r.as_dict() for r in self.rests],
            "queued": list(self.queued),
            "retrying": self.retrying,
            "action": self.action,
            "model": self.model,
            "tools": dict(self.tools),
            "age_s": self.age(now),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "last_event_at": self.last_at,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "restarts": self.restarts,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "events": self.events,
            "held_by": self.held_by,
            "readable": self.readable,
            "parent": self.parent,
            "final_text": self.final_text,
        }


def _holder_text(holder: int | str) -> str:
    if isinstance(holder, str):
        return f"held by worker {holder}"  # a PostgreSQL lease's owner
    return f"held by pid {holder}" if holder else "held by a process"


NOT_A_JOURNAL = (
    "not a journal of this store: move it out of runs/ (only regular files named "
    "RUN_ID.journal are runs)"
)
"""What to do about an entry of ``runs/`` that is no run's journal (a directory, a FIFO, a
link, a file whose name is no run id)."""


def unreadable(run_id: str, problem: str, *, action: str | None = None) -> RunSummary:
    """The summary of a run whose journal cannot be read; ``action`` says what a person can
    do (by default what the problem calls for: a journal of another run is no damage that
    ``tether journal repair`` could mend)."""
    if action is None:
        if "header names run" in problem:
            action = (
                "the file holds another run's journal (copied or renamed): give it back its "
                "own name, or move it out of runs/ (`tether journal dump` reads it)"
            )
        elif "invalid run id" in problem:
            action = NOT_A_JOURNAL
        else:
            action = "see `tether journal verify` and `tether journal repair`"
    return RunSummary(
        run_id=run_id,
        status=RunStatus.NEEDS_ATTENTION.value,
        reason=f"journal cannot be read: {problem}",
        readable=False,
        action=action,
    )


def unfoldable(run_id: str, problem: RunRecordsError, events: int) -> RunSummary:
    """The summary of a run whose journal is intact but whose records do not make a run."""
    return RunSummary(
        run_id=run_id,
        status=RunStatus.NEEDS_ATTENTION.value,
        reason=f"its journal's records do not make a run: {problem}",
        events=events,
        readable=False,
        action="the journal is intact (`tether journal verify`) but was not written by a run's "
        "supervisor: read its records with `tether journal dump`",
    )


def summarize(
    run_id: str,
    events: list[AnyEvent],
    held_by: int | str | None = None,
    *,
    now: float | None = None,
    queued: list[AnyEvent] | None = None,
) -> RunSummary:
    """The summary of a run from its events (and who holds it, if anyone: see ``holder_of``),
    at wall-clock ``now`` (default: the time now).

    ``queued``: the answers waiting in the run's inbox (``Store.peek_inbox``). The status
    is the journal's; the calls those answers will answer, as the holder will record them,
    are no longer offered as questions but named in ``queued``.

    A journal that cannot be folded gives an unreadable summary rather than an error.
    """
    try:
        state = fold(events)
    except RunRecordsError as exc:
        return unfoldable(run_id, exc, len(events))
    except ValueError as exc:  # (a record whose contents the fold cannot take)
        return unreadable(run_id, str(exc))
    if state.started is None:
        return RunSummary(
            run_id=run_id,
            status=RunStatus.NEEDS_ATTENTION.value,
            reason="the journal has no run_started record",
            events=len(events),
            held_by=held_by,
            state=state,
        )
    at = time.time() if now is None else now
    outcome = run_status(state, at)
    status, reason = outcome.status, outcome.reason
    # Every call a person can answer now, also while other calls of the turn still run or a
    # process holds the run (an answer then waits in the run's inbox for that process).
    asks = state  # the run as its holder will find it, and what it will record of the inbox
    words: tuple[str, ...] = ()
    if queued and state.finished is None:
        from ..supervisor._verbs import applying  # (``tether runs`` imports no tools)

        asks = fold(events)  # a second fold, only for a run with answers waiting
        taken = applying(asks, queued, at)
        words = tuple([answer_words(run_id, answer, asks) for answer in taken])
    questions = questions_of(asks, answerable(asks, at))
    parked = state.parked if state.finished is None else None
    if held_by is not None and state.finished is None and parked is None:
        status, reason = RunStatus.RUNNING, ""  # a process is advancing it right now
    changes_at = outcome.wake_at
    for w in questions:
        if w.deadline is not None and (changes_at is None or w.deadline < changes_at):
            changes_at = w.deadline  # the approval's wait ends then: it leaves the inbox
    return RunSummary(
        run_id=run_id,
        status=status.value,
        reason=reason,
        started_at=state.started.at,
        finished_at=state.finished.at if state.finished is not None else None,
        last_at=events[-1].at if events else None,
        model_calls=state.model_calls,
        tool_calls=state.tool_calls,
        restarts=state.restarts,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_creation_tokens=state.cache_creation_tokens,
        cache_read_tokens=state.cache_read_tokens,
        events=len(events),
        questions=questions,
        final_text=state.final_text,
        held_by=held_by,
        parent=state.started.parent,
        rests=rests_of(asks, at),
        model=state.manifest.model,
        tools=tuple((pin.name, pin.version) for pin in state.manifest.tools),
        action=parked_action(parked.cause) if parked is not None else "",
        queued=words,
        retrying=_retrying(state) if state.finished is None and state.parked is None else "",
        state=state,
        changes_at=changes_at,
    )


def _retrying(state: RunState) -> str:
    """The run's model calls fail for now: the last failure, and when the model is asked
    again."""
    failure = state.last_model_failure
    if failure is None or failure.retry_at is None:
        return ""
    when = time.strftime("%H:%M:%S", time.localtime(failure.retry_at))
    times = f"{state.model_failures} times" if state.model_failures > 1 else "once"
    return f"the model call failed {times}, last: {failure.error}; asked again at {when}"


def rests_of(state: RunState, now: float) -> tuple[Rest, ...]:
    """The calls waiting for the world at ``now``, as ``run_status`` reads them: a time, an
    event, a child run, or their tool's service (``service``: resolve answers it)."""
    rests: list[Rest] = []
    for call in state.calls.values():
        wait = call.wait
        if call.done or (wait is None and call.unreached is None):
            continue
        rest = world_wait(state, call, now)
        if rest is None:
            continue
        what, until = rest
        if wait is None:  # its service could not be reached: it waits for its next try
            rests.append(Rest(call.id, call.name, "service", what, until))
            continue
        child = str(wait.child.get("run_id")) if wait.child is not None else None
        kind: Literal["time", "event", "child"] = (
            "child" if child is not None else "event" if wait.event is not None else "time"
        )
        rests.append(Rest(call.id, call.name, kind, what, until, wait.event, child))
    return tuple(rests)


def answerable(state: RunState, now: float) -> tuple[str, ...]:
    """The calls a person can answer at ``now``: escalated ones (resolve), then those waiting
    for approval whose deadline has not passed (approve or reject), in the turn's order.

    The same calls ``run_status`` names as pending when the run waits for a person, but also
    while other calls of the turn can still run. None for a finished or parked run.
    """
    if state.finished is not None or state.parked is not None or not state.turn_open:
        return ()
    calls = [c for c in state.calls.values() if not c.done]
    escalated = [c.id for c in calls if c.escalated]
    approvals = [
        c.id
        for c in calls
        if not c.escalated
        and world_wait(state, c, now) is None
        and approval_wait(state, c, now) is not None
    ]
    return (*escalated, *approvals)


def questions_of(state: RunState, pending: tuple[str, ...]) -> tuple[Question, ...]:
    """The calls ``pending`` (as ``run_status`` names them) as what a person has to answer."""
    waiting: list[Question] = []
    for call_id in pending:
        call = state.calls[call_id]
        if call.escalated and call.escalation is not None:
            waiting.append(
                Question(
                    call.id, call.name, "resolution", call.escalation.at, call.escalation.reason
                )
            )
        else:
            deadline = approval_deadline(state, call)
            waiting.append(Question(call.id, call.name, "approval", call.started_at, "", deadline))
    return tuple(waiting)


async def load_summary(
    store: Store, run_id: str, *, now: float | None = None
) -> tuple[list[AnyEvent], RunSummary]:
    """A run's events (read without its lock or lease) and summary, with the answers waiting
    in its inbox.

    Raises:
        RunNotFoundError, InvalidRunIdError, JournalCorruptError, JournalVersionError, OSError.
    """
    events = await store.read(run_id)
    holder = await holder_of(store, run_id)
    queued = await store.peek_inbox(run_id) if await store.has_inbox(run_id) else None
    return events, summarize(run_id, events, holder, now=now, queued=queued)


async def load_summaries(store: Store) -> list[RunSummary]:
    """Every run of the store; a journal that cannot be read gives an unreadable summary, and so
    does an entry of a directory store's ``runs/`` named like a journal that is not a regular
    file (a directory, a FIFO...), so that nothing there hides the other runs.

    Raises:
        OSError: the store's directory cannot be listed.
    """
    out: list[RunSummary] = []
    for run_id in await store.list_runs():
        try:
            _, summary = await load_summary(store, run_id)
        except RunNotFoundError:
            continue  # removed since it was listed
        except (JournalError, InvalidRunIdError) as exc:
            summary = unreadable(run_id, str(exc))
        out.append(summary)
    if isinstance(store, FileStore):
        for name, kind in (await store.odd_entries()).items():
            if name.endswith(".journal"):
                path = os.path.join(store.runs_dir, name)
                reason = f"{path} is {kind}, not a regular file"
                out.append(unreadable(name.removesuffix(".journal"), reason, action=NOT_A_JOURNAL))
        out.sort(key=lambda s: s.run_id)
    return out


def by_status(summaries: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """``summaries`` by status, each list in the order given."""
    groups: dict[str, list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault(s.status, []).append(s)
    return groups


def has_children(summaries: list[RunSummary]) -> bool:
    """Whether any of ``summaries`` is a child run (a look at C speed: 10,000 in a page view)."""
    return any(map(_PARENT, summaries))


_PARENT = attrgetter("parent")


def as_tree(summaries: list[RunSummary]) -> list[tuple[int, RunSummary]]:
    """``summaries`` with every child run right under its parent, and its depth (0 for a run
    with no parent in the list), each level in the order given."""
    if not has_children(summaries):  # no child runs (most stores): as given
        return [(0, s) for s in summaries]
    ids = {s.run_id for s in summaries}
    children: dict[str | None, list[RunSummary]] = {}
    for s in summaries:
        children.setdefault(s.parent if s.parent in ids else None, []).append(s)
    out: list[tuple[int, RunSummary]] = []
    stack = [(0, s) for s in reversed(children.get(None, []))]
    while stack:
        depth, s = stack.pop()
        out.append((depth, s))
        stack += [(depth + 1, c) for c in reversed(children.get(s.run_id, []))]
    if len(out) < len(summaries):  # parents naming each other (hand-made journals): flat
        seen = {id(s) for _, s in out}
        out += [(0, s) for s in summaries if id(s) not in seen]
    return out
