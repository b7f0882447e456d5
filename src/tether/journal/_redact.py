"""Redaction: secrets are removed from every event before it is encoded.

A redactor is any ``Callable[[Event], Event]``. ``SecretRedactor`` is the default: it replaces
strings that look like credentials (API keys, bearer tokens, private keys) anywhere in an event
with ``[REDACTED]``. An event without a secret is returned unchanged, and costs little: with
the default patterns, one MessagePack encoding of it and a few substring searches of that,
for the literal text every default pattern's match starts with (``DEFAULT_HINTS``; strings
are stored unescaped in MessagePack, so a match in any string holds its hint byte for byte).
Only an event holding a hint is searched with the patterns themselves (over its JSON text),
and only one with a match is walked and rebuilt. Other patterns have no hints: every event is
searched with them.

A directory store's journal asks even less of it (``screen_for`` in ``_store``): an append
frames its events as given, and the hints are looked for once over the whole group's bytes
(``may_change``); only a group holding one, or a payload large enough to hold a tool result
for the blob store, has its events redacted (and moved) one by one and framed again.

Redaction changes what replay sees: a tool argument that held a secret is replayed redacted.
Keep secrets out of model-visible data; pass them to tools through closures or the environment.

What the model signed or encrypted is never altered, wherever it appears: ``thinking`` and
``redacted_thinking`` blocks, any ``signature``, and any field whose name starts with
``encrypted`` (server tool results, citations). The API checks them when they are sent back,
and a changed one fails the next request with HTTP 400; they are the model's own output, not
what tools or users put in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import msgspec

from ._records import Event

E = TypeVar("E", bound=Event)
Redactor = Callable[[Event], Event]

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"sk-ant-[A-Za-z0-9_\-]{16,}",  # Anthropic API keys
    r"sk-[A-Za-z0-9_\-]{32,}",  # OpenAI-style secret keys
    r"AKIA[0-9A-Z]{16}",  # AWS access key ids
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*",  # HTTP bearer credentials
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)

REDACTED = "[REDACTED]"

DEFAULT_HINTS: tuple[bytes, ...] = (
    b"sk-",
    b"akia",
    b"ghp_",
    b"gho_",
    b"ghu_",
    b"ghs_",
    b"ghr_",
    b"xox",
    b"bearer",
    b"-----begin",
)
"""What a match of each default pattern starts with, lower-cased: an event whose lower-cased
MessagePack encoding holds none of these holds no match of ``DEFAULT_PATTERNS``."""

SIGNED_BLOCKS: frozenset[str] = frozenset({"thinking", "redacted_thinking"})
"""Content block types the API signs: sent back exactly as they came, or refused."""


_GITHUB = re.compile(rb"gh[pousr]_")


def _holds_hint(data: bytes) -> bool:
    """Whether lower-cased ``data`` holds one of ``DEFAULT_HINTS`` (written out: a loop over
    them costs as much as all the searches together). Each search walks the whole of ``data``;
    the two hints that hold a ``-`` are looked for only where one is (a single-byte search,
    many times faster), so data without one costs four searches instead of six."""
    return (
        (b"-" in data and (b"sk-" in data or b"-----begin" in data))
        or b"akia" in data
        or b"xox" in data
        or b"bearer" in data
        or (b"gh" in data and _GITHUB.search(data) is not None)
    )


class SecretRedactor:
    """Replace credential-shaped strings in events.

    Args:
        patterns: regular expressions to redact; defaults to ``DEFAULT_PATTERNS``.
        extra: more patterns, added to ``patterns``.
    """

    def __init__(self, patterns: Iterable[str] | None = None, *, extra: Iterable[str] = ()) -> None:
        pats = list(DEFAULT_PATTERNS if patterns is None else patterns) + list(extra)
        self._text = re.compile("|".join(f"(?:{p})" for p in pats)) if pats else None
        self._json_enc = msgspec.json.Encoder()
        self._hints = DEFAULT_HINTS if pats == list(DEFAULT_PATTERNS) else None
        self._pack = msgspec.msgpack.Encoder()

    def redact_text(self, text: str) -> str:
        """``text`` with every match replaced by ``[REDACTED]``."""
        return text if self._text is None else self._text.sub(REDACTED, text)

    def __call__(self, event: E) -> E:
        if self._text is None:
            return event
        if self._hints is not None and not self._may_hold(event):
            return event
        # One search over the event's JSON text decides. JSON escapes the newlines inside a PEM
        # block, so its marker is looked for separately.
        raw = self._json_enc.encode(event).decode("utf-8")
        if not self._text.search(raw) and "PRIVATE KEY-----" not in raw:
            return event
        builtins = msgspec.to_builtins(event)
        cleaned = self._walk(builtins)
        if cleaned == builtins:
            return event
        return msgspec.convert(cleaned, type(event))

    def _may_hold(self, event: Event) -> bool:
        """Whether ``event`` holds a hint (or cannot be encoded as MessagePack to say)."""
        try:
            data = self._pack.encode(event)
        except (OverflowError, TypeError, msgspec.EncodeError):  # an int past 64 bits, say
            return True
        return _holds_hint(data.lower())

    @property
    def screens(self) -> bool:
        """Whether ``may_change`` can tell from an event's bytes (the default patterns, whose
        matches start with ``DEFAULT_HINTS``); otherwise only ``__call__`` can."""
        return self._hints is not None

    def may_change(self, data: bytes) -> bool:
        """Whether this redactor may change an event whose MessagePack encoding is within
        ``data`` (a journal's group of frames, say): ``False`` only where it certainly would
        not (no pattern at all, or no hint in it); with patterns but no hints (not
        ``screens``), always ``True``."""
        if self._text is None:
            return False
        return self._hints is None or _holds_hint(data.lower())

    def _walk(self, value: Any, key: str = "") -> Any:
        if key == "signature" or key.startswith("encrypted"):
            return value  # signed or encrypted by the model: left exactly as it is
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            if value.get("type") in SIGNED_BLOCKS:
                return value
            return {k: self._walk(v, k) for k, v in value.items()}
        return value
