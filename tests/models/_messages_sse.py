"""A Messages answer as the API streams it (``stream: true``): server-sent events.

The order is the API's: ``message_start`` (the message with no content, ``stop_reason`` null
and the input side of ``usage``), a ``ping``, then for each block ``content_block_start``,
its ``content_block_delta`` events and ``content_block_stop``, then ``message_delta`` (stop
reason, stop sequence, stop details and the final usage) and ``message_stop``.

What the SDK's accumulator (``anthropic/lib/streaming/_messages.py``, ``accumulate_event``)
needs to rebuild the answer exactly:

- ``text``: starts with ``text: ""``; ``text_delta`` pieces are appended; each citation
  arrives as a ``citations_delta`` and is appended to ``citations``.
- ``tool_use`` and ``server_tool_use`` (its ``TRACKS_TOOL_INPUT``): start with ``input: {}``;
  the ``partial_json`` of ``input_json_delta`` events is concatenated and parsed with
  ``jiter.from_json(..., partial_mode=True)`` after each one, so a tool input cut off by
  ``max_tokens`` ends up as whatever that parse keeps (an unfinished string is dropped).
- ``thinking``: starts with empty ``thinking`` and ``signature``; ``thinking_delta`` pieces
  are appended; one ``signature_delta`` sets the signature.
- any other block (``redacted_thinking``, server tool results, ``container_upload``) comes
  whole in ``content_block_start``.
- ``message_delta`` sets ``stop_reason``, ``stop_sequence``, ``stop_details`` and
  ``output_tokens``, and overwrites ``input_tokens``, the cache counts, ``server_tool_use`` and
  ``output_tokens_details`` when present (they are cumulative totals); the rest of ``usage``
  survives from ``message_start``.

An error that strikes mid-stream (the API sends ``overloaded_error`` this way, with HTTP 200)
is an ``error`` event after ``message_start``; the SDK raises it as an ``APIStatusError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

CHUNK = 7
"""Characters per delta: small, so every block takes several deltas to rebuild."""

_DELTA_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "server_tool_use",
    "output_tokens_details",
)


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), CHUNK):
        yield text[start : start + CHUNK]


def _block_events(
    index: int, block: dict[str, Any], partial_json: str | None
) -> Iterator[dict[str, Any]]:
    kind = block["type"]
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {k: v for k, v in block.items() if k != "citations"} | {"text": ""}
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
        deltas += [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
    elif kind in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        raw = json.dumps(block["input"]) if partial_json is None else partial_json
        deltas.append({"type": "input_json_delta", "partial_json": ""})
        deltas += [{"type": "input_json_delta", "partial_json": p} for p in _pieces(raw)]
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        deltas += [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start = block
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def events(
    message: dict[str, Any],
    *,
    partial_json: Mapping[int, str] | None = None,
    error: dict[str, Any] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event name, data) pairs that stream ``message`` (a whole Messages response body).

    ``partial_json`` gives, by block index, the raw input JSON to stream for a tool use that
    ``max_tokens`` cut short. With ``error`` (an error body), the stream breaks off with it
    right after ``message_start``.
    """
    usage: dict[str, Any] = message["usage"]
    start_usage = {k: v for k, v in usage.items() if k not in _DELTA_USAGE[3:]}
    start_usage["output_tokens"] = min(1, usage["output_tokens"])
    head = {
        k: v
        for k, v in message.items()
        if k not in ("stop_reason", "stop_sequence", "stop_details", "container")
    }
    head |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    yield "message_start", {"type": "message_start", "message": head}
    yield "ping", {"type": "ping"}
    if error is not None:
        yield "error", error
        return
    for index, block in enumerate(message["content"]):
        for event in _block_events(index, block, (partial_json or {}).get(index)):
            yield str(event["type"]), event
    delta = {
        "stop_reason": message["stop_reason"],
        "stop_sequence": message.get("stop_sequence"),
    }
    for key in ("stop_details", "container"):
        if message.get(key) is not None:
            delta[key] = message[key]
    end_usage = {"output_tokens": usage["output_tokens"]}
    end_usage |= {k: usage[k] for k in _DELTA_USAGE if usage.get(k) is not None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": end_usage}
    yield "message_stop", {"type": "message_stop"}


def encode(stream: Iterator[tuple[str, dict[str, Any]]]) -> bytes:
    """Server-sent events on the wire: ``event:`` and ``data:`` lines, a blank line after each."""
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in stream
    )
