"""The journal's vocabulary: one frozen, tagged ``msgspec.Struct`` per event type.

Encoding is MessagePack through one shared encoder and decoder. Each event carries its ``seq``
(contiguous from 0 within a run, stamped by the journal when appended) and ``at`` (wall-clock
seconds when it was appended, for people reading a timeline; replay never uses it as a clock for
decisions except deadlines, which are defined in wall-clock time).

Rules for evolving the vocabulary (the format version lives in the file header):

1. A new field gets a default. Fields are keyword-only, so position does not matter, but put new
   ones last to keep the definitions readable.
2. A field's type never changes, and a field is never renamed: add a new one instead.
3. A tag is never reused. A removed event type keeps its tag reserved in ``RESERVED_TAGS``.
4. A reader ignores fields it does not know (msgspec's default), so an older tether can read a
   journal from a newer one as long as the header's format version is unchanged. Changes that
   older readers must not misread bump ``FORMAT_VERSION`` in ``_format.py``.

Records are left out of the cyclic garbage collector (``gc=False``): a run holds every event
of its journal, and each tracked one would be walked by every collection of the process. That
is msgspec's rule to keep: an instance must never be part of a reference cycle (one could
then never be freed). Records are frozen, and their fields hold plain data made for them
(decoded from a file, a tool's result round-tripped through JSON, a model's reply turned into
a message), so nothing reachable from a record refers back to it; a new record type or field
must keep it so (``tests/journal/test_records_untracked.py``). The containers inside a record
(a message's dicts and lists) are still tracked.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 1
"""Version of the event vocabulary, pinned into every ``RunStarted``."""

RESERVED_TAGS: frozenset[str] = frozenset()
"""Tags of removed event types: never to be used again."""

JSONValue = Any
"""A value msgspec can encode: ``None``, bool, int, float, str, lists and str-keyed dicts."""


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag_field="type"):
    """Base of every journal event. Never instantiated itself."""

    seq: int = -1
    at: float = 0.0


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Tokens one model call consumed.

    ``input_tokens`` counts input read neither from nor into the prompt cache; the cache's two
    parts are apart, as the API bills them. Records written before they were apart folded both
    into ``input_tokens`` (and leave the cache fields 0), so totals read the same.

    ``reasoning_tokens`` are the part of ``output_tokens`` the model spent reasoning, where the
    API reports them (OpenAI's models do); they are already in ``output_tokens`` and so not
    added to ``total`` again.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total(self) -> int:
        """Every token of the call: what a token budget counts."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


class ToolPin(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The contract of one tool a run started with.

    ``approval`` and ``approval_timeout`` are recorded so that tools reading a journal without
    the application (``tether runs``) can tell a call parked for approval from one not started.
    ``description`` and ``input_schema`` are the contract itself, as the model was shown it
    (what ``schema_hash`` covers), so that a changed contract can be shown side by side with
    the new one and judged compatible or not (``tether check``); pins written before they
    were recorded have ``input_schema`` ``None``.
    """

    name: str
    version: str
    schema_hash: str
    approval: bool = False
    approval_timeout: float | None = None
    cache_control: dict[str, JSONValue] | None = None
    description: str = ""
    input_schema: dict[str, JSONValue] | None = None


class Manifest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything a run pins when it starts, checked again on every resume.

    A system prompt given as text is ``system``; one given as a list of blocks (to put
    ``cache_control`` on it) is ``system_blocks``, and ``system`` is then ``None``.
    ``system_hash`` covers whichever is set.
    """

    model: str
    model_params: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    system: str | None = None
    system_hash: str = ""
    tools: list[ToolPin] = msgspec.field(default_factory=list)
    app_version: str = ""
    schema_version: int = SCHEMA_VERSION
    system_blocks: list[dict[str, JSONValue]] | None = None

    @property
    def system_prompt(self) -> str | list[dict[str, JSONValue]] | None:
        """The system prompt as the model is given it: text, blocks, or none."""
        return self.system_blocks if self.system_blocks is not None else self.system


DEFAULT_MAX_MODEL_CALLS = 100
"""The model-call limit of a run whose ``Budgets`` does not set one: a loop that never ends
costs at most this many calls. ``Budgets(max_model_calls=None)`` is unlimited on purpose."""


class Budgets(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Limits of one run, counted from its journal so that restarts cannot reset them.

    ``None`` means unlimited. ``deadline_s`` is wall-clock seconds from the run's start.
    ``max_model_calls`` defaults to ``DEFAULT_MAX_MODEL_CALLS`` (100); journals written before
    that default existed recorded ``None`` and stay unlimited. ``max_restarts`` bounds the
    *consecutive* interruptions without progress (a crash loop), not restarts in all: a run
    that makes progress between kills finishes however often it is killed, and a graceful stop
    never counts.
    """

    max_model_calls: int | None = DEFAULT_MAX_MODEL_CALLS
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    deadline_s: float | None = None
    max_restarts: int | None = None


class BlobRef(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A payload kept in the content-addressed blob store instead of the journal."""

    digest: str
    size: int
    summary: str = ""


class RunStarted(Event, frozen=True, kw_only=True, tag="run_started"):
    """A run begins: what it pins, what it is asked, its limits. A child run (started by a
    tool of another run) names its ``parent`` run and the ``parent_call`` that waits for it."""

    run_id: str
    manifest: Manifest
    messages: list[dict[str, JSONValue]]
    budgets: Budgets = msgspec.field(default_factory=Budgets)
    parent: str | None = None
    parent_call: str | None = None
    trace: dict[str, str] | None = None  # W3C trace context of the run (tether.otel), if traced


class ModelResponse(Event, frozen=True, kw_only=True, tag="model_response"):
    """The model's answer, journaled whole before anything acts on it.

    ``stop_reason`` is why the model stopped (``end_turn``, ``tool_use``, ``max_tokens``,
    ``pause_turn``, ``refusal``, ...; ``None`` when the model does not say), and
    ``stop_details`` whatever more the API said about it.
    """

    message: dict[str, JSONValue]
    usage: Usage = msgspec.field(default_factory=Usage)
    stop_reason: str | None = None
    stop_details: dict[str, JSONValue] | None = None
    response_id: str | None = None  # the provider's id of the response, when it gives one


class ToolStarted(Event, frozen=True, kw_only=True, tag="tool_started"):
    """Attempt ``attempt`` of call ``call_id`` (of tool ``name``) is about to run: journaled
    before the tool is, so a crash leaves a started call without a result for its policy."""

    call_id: str
    name: str = ""
    attempt: int = 1


class ToolResult(Event, frozen=True, kw_only=True, tag="tool_result"):
    """A call's result. ``blocks``: ``content`` is a list of content blocks (text, images,
    documents) the model reads as they are, rather than a value sent as JSON text.
    ``signal_id``: the result is the payload of that signal, which it takes (a call that
    waited for an event)."""

    call_id: str
    ok: bool
    content: JSONValue = None
    blob: BlobRef | None = None
    blocks: bool = False
    signal_id: str = ""


class Decision(Event, frozen=True, kw_only=True, tag="decision"):
    """A person's answer to an approval gate: call ``call_id`` may run (``approved``) or not,
    answered ``by`` someone, with an optional ``note``."""

    call_id: str
    approved: bool
    by: str
    note: str = ""


class Escalated(Event, frozen=True, kw_only=True, tag="escalated"):
    """Call ``call_id`` needs a person (its outcome is unknown and its policy will not guess,
    say): the run parks as ``needs_attention`` until a ``Resolved`` answers it."""

    call_id: str
    reason: str


Resolution = Literal["succeeded", "retry", "failed"]
"""What a person says of an escalated call: it ``succeeded``, should run again, or ``failed``."""

RESOLUTIONS: tuple[Resolution, ...] = typing.get_args(Resolution)


class Resolved(Event, frozen=True, kw_only=True, tag="resolved"):
    """A person's answer to an escalated call: it ``succeeded`` (with ``result``), should be
    run again (``retry``) or ``failed``; or to a call that waits for its tool's service (its
    ``succeeded`` or ``failed`` given in place of the service's answer).

    ``attempts``, set for an answer to a call that waits for its service, is how many attempts
    the call had when the answer was checked: the wait it answers. Queued while another
    process held the run, it is recorded only if the call still waits for its service after
    those attempts (tried again meanwhile, its question may be another one: an attempt sent
    that ended with its outcome unknown). ``None`` (an escalated call, or a record written
    before the field existed): no such condition."""

    call_id: str
    outcome: Resolution
    result: JSONValue = None
    by: str = ""
    note: str = ""
    attempts: int | None = None


def result_text(content: Any) -> str:
    """A tool result as the text the model reads: strings as they are, anything else as JSON."""
    if isinstance(content, str):
        return content
    return msgspec.json.encode(content).decode()


FIRST_DRIVE = "first drive"
"""``Resumed.cause`` of a run first driven by a process other than the one that created it."""


class Resumed(Event, frozen=True, kw_only=True, tag="resumed"):
    """A process took up a run that stopped mid-work.

    ``cause`` says how the last owner stopped: ``"crash"`` (it died, or lost the run, with no
    word), ``"error: ..."`` (the run's task raised in this process), ``"shutdown"`` (it
    suspended the run on purpose), ``"store: ..."`` (the store failed under it),
    ``"first drive"`` (the run had not taken a step yet). ``charged`` says whether it counts
    towards crash-loop detection: only crashes and the run's own errors do. Records written
    before these fields existed read as charged crashes. ``taken_from`` names the worker whose
    expired lease this owner took the run over from (PostgreSQL), whose calls may still have
    been running if it was only paused.
    """

    attempt: int
    host: str = ""
    pid: int = 0
    cause: str = "crash"
    charged: bool = True
    taken_from: str = ""


class Suspended(Event, frozen=True, kw_only=True, tag="suspended"):
    """The owner stopped advancing the run on purpose (a graceful shutdown, a cancellation of
    the process's work): the next owner resumes it without counting an interruption."""

    reason: str = ""
    host: str = ""
    pid: int = 0


class ModelFailed(Event, frozen=True, kw_only=True, tag="model_failed"):
    """A model call that gave no usable answer.

    ``kind`` is ``"transient"`` (overloaded, rate-limited, a server error, the connection:
    asked again at ``retry_at``) or ``"malformed"`` (an answer the runtime cannot use: asked
    again at ``retry_at`` too, the third in a row parks the run; a malformed record without a
    ``retry_at``, from before, was asked again at once). ``usage`` holds the tokens of a
    rejected answer when the model reported them.
    """

    kind: str
    error: str
    retry_at: float | None = None
    usage: Usage = msgspec.field(default_factory=Usage)


class ToolFailed(Event, frozen=True, kw_only=True, tag="tool_failed"):
    """One attempt of a tool call ended without a result the run keeps: an error the tool
    declared worth retrying (``retry_on``), a timeout (``timed_out``: its outcome is
    unknown), or a service that could not be reached (``unsent``: nothing was sent, so the
    attempt had no effect). What comes next (another attempt at ``retry_at``, an escalation,
    an error result) is the call's replay decision.

    ``unsent`` attempts are tried again without limit and count against neither the tool's
    ``retries`` nor the run's ``max_tool_calls``: an outage is not the run's doing. Such a
    record never has ``timed_out``. A tether from before the field ignores it and reads an
    ordinary failure: it counts the unsent attempts against ``retries`` and
    ``max_tool_calls``, so it may give the model an error result or fail the run on its
    budget (a rollback during a tool outage; see docs/how-to/deploy-changes.md)."""

    call_id: str
    attempt: int
    error: str
    timed_out: bool = False
    retry_at: float | None = None
    unsent: bool = False


class Parked(Event, frozen=True, kw_only=True, tag="parked"):
    """The runtime stopped the run for a cause a person must fix (``needs_attention``).

    ``cause`` is ``"model"`` (the model refused the request for good: a bad request, missing or
    rejected credentials, a model that does not exist, answers that stay malformed),
    ``"crash_loop"`` (its process kept stopping without progress) or ``"contract"`` (the
    process that would continue it lacks the model, parameters, system prompt, app version or
    tool contract the run pinned). The run waits with no task until a ``retried`` record sends
    it on; for ``"contract"``, a process that has the pinned contracts writes that record
    itself (a deploy rolled back, or a worker of the old version beside the new).
    """

    reason: str
    cause: str = ""


class Retried(Event, frozen=True, kw_only=True, tag="retried"):
    """A person sent a parked or failed run on (``tether retry``, ``Supervisor.retry``), or a
    process that has the contracts a run was parked for lacking (``by`` empty, the ``note``
    naming the process).

    A failed run is re-opened: its ``run_finished`` no longer holds, and ``budgets`` (when
    given) replaces the limits it failed on. The crash-loop count starts again.
    """

    by: str = ""
    note: str = ""
    budgets: Budgets | None = None


class RunFinished(Event, frozen=True, kw_only=True, tag="run_finished"):
    """The run ended with ``status`` (``done``, ``failed``, ``cancelled``...), and why."""

    status: str
    reason: str = ""


class Waiting(Event, frozen=True, kw_only=True, tag="waiting"):
    """A call's attempt ended in a wait: until ``until`` (a sleep), for a signal named
    ``event`` (at most until ``until``, when set), or for the child run ``child`` to end (its
    ``run_id``, ``messages``, ``system`` and ``budgets``: what starts it, exactly once). When
    the wait ends, ``result`` (``ok``) is the call's result, unless a signal brought a payload
    or the child its answer."""

    call_id: str
    attempt: int
    until: float | None = None
    event: str | None = None
    result: JSONValue = None
    ok: bool = True
    child: dict[str, JSONValue] | None = None


class ChildEnded(Event, frozen=True, kw_only=True, tag="child_ended"):
    """The child run a call waited for ended: its status, final answer or reason, and what it
    spent (counted into this run's budgets)."""

    call_id: str
    child: str
    status: str
    final_text: str | None = None
    reason: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    model_calls: int = 0
    tool_calls: int = 0


class Signal(Event, frozen=True, kw_only=True, tag="signal"):
    """A named event delivered to the run (``Supervisor.signal``, ``tether signal``), kept
    until a call that waits for it takes it. ``signal_id`` makes a second delivery count
    once."""

    name: str
    signal_id: str
    payload: JSONValue = None
    by: str = ""


class Repinned(Event, frozen=True, kw_only=True, tag="repinned"):
    """The run goes on under a contract it did not start with: ``tools`` replace the pins of
    the same names (or are added), ``model`` and ``model_params`` the model's, from this record
    on. ``by`` is the person who accepted it (``tether repin``), or empty when a tool declared
    the change compatible and the runtime took it (``note`` says which and why). Earlier
    turns stay as they were journaled; the model is shown the new contract from its next call.
    """

    tools: list[ToolPin] = msgspec.field(default_factory=list)
    model: str | None = None
    model_params: dict[str, JSONValue] | None = None
    by: str = ""
    note: str = ""


ANSWERS = (Decision, Resolved, Retried)
"""A person's answers to a run at a rest (a call or a run waiting for one): written for it by
the verbs, not by a process driving it."""

FROM_OUTSIDE = (Signal, Repinned, ChildEnded)
"""Records that may be written for a run from outside, whatever it was doing (a signal, a
repin by a person or a compatible takeover by the runtime, a child run's end): they say
nothing of how its last process stopped."""

AnyEvent = (
    RunStarted
    | ModelResponse
    | ToolStarted
    | ToolResult
    | Decision
    | Escalated
    | Resolved
    | Resumed
    | RunFinished
    | Suspended
    | ModelFailed
    | ToolFailed
    | Parked
    | Retried
    | Waiting
    | Signal
    | ChildEnded
    | Repinned
)

EVENT_TYPES: tuple[type[Event], ...] = typing.get_args(AnyEvent)
"""Every event type, in ``AnyEvent``'s order: the one list, which everything else derives from
(a ``match`` over ``AnyEvent`` that misses one is a type error: see ``RunState.apply``)."""

ENCODER = msgspec.msgpack.Encoder()
DECODER: msgspec.msgpack.Decoder[AnyEvent] = msgspec.msgpack.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    """Encode one event as MessagePack."""
    return ENCODER.encode(event)


def decode_event(data: bytes | memoryview) -> AnyEvent:
    """Decode one event; raises ``msgspec.DecodeError`` or ``msgspec.ValidationError``."""
    return DECODER.decode(data)


def check_types(event: Event, what: str) -> None:
    """Raise ``TypeError`` if ``event`` has a field of another type than its record declares,
    ``ValueError`` if it holds what no journal can encode (a lone surrogate, an integer beyond
    64 bits, nesting deeper than the interpreter's stack).

    msgspec checks types when it decodes a record, not when one is made: an answer built from
    a caller's wrongly typed argument (``by=5``) would be written, fsync'd and acknowledged,
    and the journal would then not read (``corrupt ... Expected `str`, got `int``). So a
    record made from what a caller gave is decoded once before it is written. ``what`` names
    it in the error (``a signal``).
    """
    try:
        DECODER.decode(ENCODER.encode(event))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError) as exc:
        raise TypeError(f"{what}: {exc}") from None
    except UnicodeEncodeError:
        raise ValueError(
            f"{what}: holds text that is not valid Unicode (a lone surrogate, as bytes that "
            "are not UTF-8 decode to)"
        ) from None
    except OverflowError:
        raise ValueError(f"{what}: holds an integer beyond 64 bits") from None
    except RecursionError:
        raise ValueError(f"{what}: nested too deeply to record") from None
