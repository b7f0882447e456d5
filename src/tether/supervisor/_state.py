"""A run's state, folded from its journal. Pure: no I/O, no clock.

Replay does not regenerate anything: the conversation the model sees, the tool calls awaiting a
result, and every counter a budget checks are all computed here from journal events, the same
way for a fresh run and for one resumed in another process (docs/design.md invariants 4 and 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, assert_never

import msgspec

from .._errors import RunRecordsError
from ..journal import (
    AnyEvent,
    Budgets,
    ChildEnded,
    Decision,
    Escalated,
    Manifest,
    ModelFailed,
    ModelResponse,
    Parked,
    Repinned,
    Resolved,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Signal,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
    Usage,
    Waiting,
)
from ..journal._records import ANSWERS, FIRST_DRIVE, FROM_OUTSIDE, result_text
from ..models import (
    ContentBlock,
    Conversation,
    Message,
    ToolResultBlock,
    blocks_of,
    message_of,
    messages_of,
    text_of,
    tool_uses,
)

_PROGRESS = (
    ModelResponse,
    ToolResult,
    ToolFailed,
    Waiting,
    Decision,
    Resolved,
    Retried,
    Repinned,
)
"""Records that mean the run moved on (or a person answered): a crash loop's count restarts.
A ``tool_failed`` that was never sent (``unsent``) is no progress: see ``RunState.apply``."""


class RunStatus(StrEnum):
    """Where a run stands.

    ``running`` is the only status that needs a task; every other one is a resting status
    (``sup.wait`` returns on it). ``waiting_for_approval`` and ``needs_attention`` wait for a
    person; ``sleeping`` for the world: a time, an event, a child run's end or a tool's
    service that could not be reached (a call that sleeps, waits for a signal or for its
    child, or waits to try its service again);
    ``done``, ``failed`` and ``cancelled`` are final.
    """

    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    SLEEPING = "sleeping"
    NEEDS_ATTENTION = "needs_attention"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether the run can never continue."""
        return self in (RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED)

    @property
    def resting(self) -> bool:
        """Whether the run needs no task right now."""
        return self is not RunStatus.RUNNING


@dataclass
class Call:
    """One tool call of the model's latest turn, with everything the journal says about it."""

    id: str
    name: str
    input: Any
    started_at: float
    attempts: int = 0
    started_seq: int = -1  # the seq of the latest ``tool_started``, -1 before the first
    result: ToolResult | None = None
    decision: Decision | None = None
    escalation: Escalated | None = None
    resolution: Resolved | None = None
    attempts_at_resolution: int = 0
    failures: int = 0
    """Failed attempts that count against the tool's ``retries`` (an unsent one does not)."""
    unsent: int = 0
    """Attempts in a row that never reached the tool's service (``tool_failed`` with
    ``unsent``): what the backoff between such attempts grows with."""
    last_failure: ToolFailed | None = None
    waiting: Waiting | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def dangling(self) -> bool:
        """Whether the latest attempt was started and nothing says how it ended (it dangles)."""
        if self.done or self.attempts == 0:
            return False
        if self.resolution is not None and self.attempts == self.attempts_at_resolution:
            return False
        failed = self.last_failure
        if failed is not None and failed.attempt == self.attempts:
            return False
        return self.wait is None

    @property
    def wait(self) -> Waiting | None:
        """The wait the latest attempt ended in (a sleep, an event), while the call has no
        result."""
        waiting = self.waiting
        if waiting is None or self.done or waiting.attempt != self.attempts:
            return None
        return waiting

    @property
    def last_attempt_failed(self) -> ToolFailed | None:
        """The ``tool_failed`` record of the latest attempt, if that is how it ended."""
        failed = self.last_failure
        if failed is None or self.done or failed.attempt != self.attempts:
            return None
        return failed

    @property
    def unreached(self) -> ToolFailed | None:
        """The ``tool_failed`` record of the latest attempt if its service could not be
        reached (nothing was sent): the call waits for the service, then runs again. ``None``
        once a person resolved it since (their answer is the call's result)."""
        if self.resolution is not None and self.attempts == self.attempts_at_resolution:
            return None
        failed = self.last_attempt_failed
        return failed if failed is not None and failed.unsent else None

    @property
    def escalated(self) -> bool:
        """Escalated and not yet resolved by a person."""
        return self.escalation is not None and self.resolution is None


@dataclass
class RunState:
    """Everything replay knows about a run; ``apply`` one event at a time, in seq order."""

    run_id: str = ""
    started: RunStarted | None = None
    messages: Conversation = field(default_factory=list)
    calls: dict[str, Call] = field(default_factory=dict)
    model_calls: int = 0
    tool_calls: int = 0
    """Attempts of tool calls made (``tool_started``), less those that were never sent."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    restarts: int = 0  # resumes after the run's own interruption (a crash, its task raised)
    resumes: int = 0  # every resume by a process that was not the first to drive it
    taken_from: str = ""  # whose expired lease the latest resume took over, until progress
    repinned: Manifest | None = None  # the manifest as the latest repin left it
    repinned_by: str = ""  # who gave the latest repin
    interruptions: int = 0
    finished: RunFinished | None = None
    parked: Parked | None = None
    model_failures: int = 0
    malformed: int = 0
    """The model's malformed answers in a row since its last answer (another failure, a retry
    or an answer breaks the row)."""
    last_model_failure: ModelFailed | None = None
    retried_budgets: Budgets | None = None
    call_ids: set[str] = field(default_factory=set)
    signals: dict[str, Signal] = field(default_factory=dict)
    signal_ids: set[str] = field(default_factory=set)
    children: dict[str, ChildEnded] = field(default_factory=dict)
    child_model_calls: int = 0
    child_tool_calls: int = 0
    applied: int = 0
    last: AnyEvent | None = None
    last_own: AnyEvent | None = None
    """The latest record that tells how the run's last process stopped: neither a person's
    answer (``ANSWERS``) nor one of the records written for it from outside
    (``FROM_OUTSIDE``)."""
    answered: bool = False
    """Whether a person answered the run (``ANSWERS``) since ``last_own``."""
    open_calls: int = 0
    """Calls of the latest turn without a result: kept as results land, so that a turn of N
    calls folds in O(N), not O(N²) (each result would otherwise look at every call)."""

    @property
    def manifest(self) -> Manifest:
        """The contracts the run goes by now: as it started, or as a ``repinned`` record
        changed them."""
        if self.repinned is not None:
            return self.repinned
        assert self.started is not None
        return self.started.manifest

    @property
    def budgets(self) -> Budgets:
        """The run's limits: as it started, or as a person last extended them."""
        if self.retried_budgets is not None:
            return self.retried_budgets
        return self.started.budgets if self.started is not None else Budgets()

    @property
    def tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_tokens
            + self.cache_read_tokens
        )

    @property
    def turn_open(self) -> bool:
        """Whether the model's latest turn has tool calls still without a result."""
        return self.open_calls > 0

    @property
    def final_text(self) -> str | None:
        """The text of the model's last message, if the conversation ends with one."""
        if not self.messages or self.messages[-1].get("role") != "assistant":
            return None
        content = self.messages[-1].get("content")
        if isinstance(content, str):
            return content
        texts = text_of(content or [])
        return "".join(texts) if texts else None

    def catch_up(self, events: Sequence[AnyEvent], blobs: dict[str, Any] | None = None) -> None:
        """Apply ``events[self.applied:]``."""
        for event in events[self.applied :]:
            self.apply(event, blobs)

    def apply(self, event: AnyEvent, blobs: dict[str, Any] | None = None) -> None:
        """Fold one event into the state.

        Raises:
            RunRecordsError: the event is out of order or refers to a call the run never made.
        """
        if event.seq != self.applied:
            raise RunRecordsError(event.seq, f"applied where record {self.applied} was expected")
        self.applied += 1
        self.last = event
        if isinstance(event, ANSWERS):
            self.answered = True
        elif not isinstance(event, FROM_OUTSIDE):
            self.last_own, self.answered = event, False
        if isinstance(event, _PROGRESS) and not (isinstance(event, ToolFailed) and event.unsent):
            # Durable progress, or a person's answer: no crash loop. An attempt never sent
            # is not progress: a sibling call that kills its process would be run again
            # without end while a call that waits for its service kept resetting the count.
            self.interruptions = 0
            self.taken_from = ""
        # One case per event type, the most frequent first; a type with no case is a type
        # error (assert_never), so a new record cannot be folded by accident as nothing.
        match event:
            case ToolStarted():
                call = self._call(event.call_id)
                call.attempts += 1
                call.started_seq = event.seq
                self.tool_calls += 1
            case ToolResult():
                self._result(event, blobs)
            case ModelResponse():
                self._answer(event)
            case RunStarted():
                self.run_id = event.run_id
                self.started = event
                self.messages = messages_of([dict(m) for m in event.messages])
            case Waiting():
                self._call(event.call_id).waiting = event
            case ChildEnded():
                if event.child not in self.children:  # an end recorded twice counts once
                    self.children[event.child] = event
                    self.child_model_calls += event.model_calls
                    self.child_tool_calls += event.tool_calls
                    self._count(event.usage)
            case Signal():
                if event.signal_id not in self.signal_ids:
                    self.signal_ids.add(event.signal_id)
                    self.signals[event.signal_id] = event
            case ToolFailed():
                call = self._call(event.call_id)
                call.last_failure = event
                if event.unsent:
                    # Nothing was sent: no retry, no tool call spent (an outage is not the
                    # run's doing, docs/design.md invariant 9).
                    call.unsent += 1
                    self.tool_calls -= 1
                else:
                    call.failures += 1
                    call.unsent = 0
            case Decision():
                self._call(event.call_id).decision = event
            case Escalated():
                call = self._call(event.call_id)
                call.escalation = event
                call.resolution = None
            case Resolved():
                call = self._call(event.call_id)
                call.resolution = event
                call.attempts_at_resolution = call.attempts
                call.failures = 0
                call.unsent = 0
            case Resumed():
                # Restarts are what the crash-loop count charges (a crash, the run's own
                # error); a run resumed after a graceful stop, a store outage or by a second
                # process was not restarted.
                self.restarts += event.charged
                self.resumes += event.cause != FIRST_DRIVE
                self.taken_from = event.taken_from
                self.interruptions += event.charged
            case Suspended():
                pass  # a graceful stop: what it means is read off ``last`` (see _resume)
            case ModelFailed():
                self.model_failures += 1
                self.malformed = self.malformed + 1 if event.kind == "malformed" else 0
                self.last_model_failure = event
                self._count(event.usage)
            case Parked():
                self.parked = event
            case Retried():
                self.parked = None
                self.finished = None
                self.model_failures = 0
                self.malformed = 0
                self.last_model_failure = None
                if event.budgets is not None:
                    self.retried_budgets = event.budgets
            case RunFinished():
                self.finished = event
            case Repinned():
                self._repinned(event)
            case _:
                assert_never(event)

    def _repinned(self, event: Repinned) -> None:
        manifest = self.manifest
        pins = {pin.name: pin for pin in manifest.tools}
        pins.update((pin.name, pin) for pin in event.tools)
        changes: dict[str, Any] = {"tools": list(pins.values())}
        if event.model is not None:
            changes["model"] = event.model
        if event.model_params is not None:
            changes["model_params"] = event.model_params
        self.repinned = msgspec.structs.replace(manifest, **changes)
        self.repinned_by = event.by
        if self.parked is not None and self.parked.cause == "contract":
            self.parked = None  # parked for the contract it has accepted now

    def _answer(self, event: ModelResponse) -> None:
        self.messages.append(message_of(event.message))
        self.model_calls += 1
        self.model_failures = 0
        self.malformed = 0
        self.last_model_failure = None
        self._count(event.usage)
        self.calls = {
            b["id"]: Call(id=b["id"], name=b["name"], input=b.get("input"), started_at=event.at)
            for b in tool_uses(blocks_of(message_of(event.message)))
        }
        self.call_ids.update(self.calls)
        self.open_calls = len(self.calls)

    def _result(self, event: ToolResult, blobs: dict[str, Any] | None) -> None:
        call = self._call(event.call_id)
        self.open_calls -= call.result is None
        call.result = event
        if event.signal_id:
            self.signals.pop(event.signal_id, None)  # taken by this call
        if not self.turn_open:
            self.messages.append(self._results_message(blobs or {}))

    def signal_for(self, event: str) -> Signal | None:
        """The oldest signal named ``event`` that no call has taken yet."""
        for signal in self.signals.values():
            if signal.name == event:
                return signal
        return None

    def _count(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_creation_tokens += usage.cache_creation_input_tokens
        self.cache_read_tokens += usage.cache_read_input_tokens

    def _call(self, call_id: str) -> Call:
        try:
            return self.calls[call_id]
        except KeyError:
            raise RunRecordsError(
                self.applied - 1, f"refers to tool call {call_id!r}, which the run never made"
            ) from None

    def _results_message(self, blobs: dict[str, Any]) -> Message:
        blocks: list[ContentBlock] = []
        for call in self.calls.values():
            result = call.result
            assert result is not None
            content = result.content
            if result.blob is not None:
                content = blobs.get(result.blob.digest, result.blob.summary)
            block: ToolResultBlock = {
                "type": "tool_result",
                "tool_use_id": call.id,
                # Blocks a tool returned, as its result recorded them (checked when it ran).
                "content": content if result.blocks else result_text(content),
                "is_error": not result.ok,
            }
            blocks.append(block)
        return {"role": "user", "content": blocks}


def fold(events: Sequence[AnyEvent], blobs: dict[str, Any] | None = None) -> RunState:
    """The state after ``events`` (a whole journal, in order)."""
    state = RunState()
    state.catch_up(events, blobs)
    return state
