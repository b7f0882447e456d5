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
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 1
"""Version of the event vocabulary, pinned into every ``RunStarted``."""

RESERVED_TAGS: frozenset[str] = frozenset()
"""Tags of removed event types: never to be used again."""

JSONValue = Any
"""A value msgspec can encode: ``None``, bool, int, float, str, lists and str-keyed dicts."""


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every journal event. Never instantiated itself."""

    seq: int = -1
    at: float = 0.0


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens one model call consumed."""

    input_tokens: int = 0
    output_tokens: int = 0


class ToolPin(msgspec.Struct, frozen=True, kw_only=True):
    """The contract of one tool a run started with.

    ``approval`` and ``approval_timeout`` are recorded so that tools reading a journal without
    the application (``tether runs``) can tell a call parked for approval from one not started.
    """

    name: str
    version: str
    schema_hash: str
    approval: bool = False
    approval_timeout: float | None = None


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a run pins when it starts, checked again on every resume."""

    model: str
    model_params: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    system: str | None = None
    system_hash: str = ""
    tools: list[ToolPin] = msgspec.field(default_factory=list)
    app_version: str = ""
    schema_version: int = SCHEMA_VERSION


class Budgets(msgspec.Struct, frozen=True, kw_only=True):
    """Limits of one run, counted from its journal so that restarts cannot reset them.

    ``None`` means unlimited. ``deadline_s`` is wall-clock seconds from the run's start.
    """

    max_model_calls: int | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    deadline_s: float | None = None
    max_restarts: int | None = None


class BlobRef(msgspec.Struct, frozen=True, kw_only=True):
    """A payload kept in the content-addressed blob store instead of the journal."""

    digest: str
    size: int
    summary: str = ""


class RunStarted(Event, frozen=True, kw_only=True, tag="run_started"):
    run_id: str
    manifest: Manifest
    messages: list[dict[str, JSONValue]]
    budgets: Budgets = msgspec.field(default_factory=Budgets)


class ModelResponse(Event, frozen=True, kw_only=True, tag="model_response"):
    message: dict[str, JSONValue]
    usage: Usage = msgspec.field(default_factory=Usage)


class ToolStarted(Event, frozen=True, kw_only=True, tag="tool_started"):
    call_id: str
    name: str = ""
    attempt: int = 1


class ToolResult(Event, frozen=True, kw_only=True, tag="tool_result"):
    call_id: str
    ok: bool
    content: JSONValue = None
    blob: BlobRef | None = None


class Decision(Event, frozen=True, kw_only=True, tag="decision"):
    call_id: str
    approved: bool
    by: str
    note: str = ""


class Escalated(Event, frozen=True, kw_only=True, tag="escalated"):
    call_id: str
    reason: str


class Resolved(Event, frozen=True, kw_only=True, tag="resolved"):
    call_id: str
    outcome: Literal["succeeded", "retry", "failed"]
    result: JSONValue = None
    by: str = ""
    note: str = ""


class Resumed(Event, frozen=True, kw_only=True, tag="resumed"):
    attempt: int
    host: str = ""
    pid: int = 0


class RunFinished(Event, frozen=True, kw_only=True, tag="run_finished"):
    status: str
    reason: str = ""


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
)

EVENT_TYPES: tuple[type[Event], ...] = (
    RunStarted,
    ModelResponse,
    ToolStarted,
    ToolResult,
    Decision,
    Escalated,
    Resolved,
    Resumed,
    RunFinished,
)

ENCODER = msgspec.msgpack.Encoder()
DECODER: msgspec.msgpack.Decoder[AnyEvent] = msgspec.msgpack.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    """Encode one event as MessagePack."""
    return ENCODER.encode(event)


def decode_event(data: bytes | memoryview) -> AnyEvent:
    """Decode one event; raises ``msgspec.DecodeError`` or ``msgspec.ValidationError``."""
    return DECODER.decode(data)
