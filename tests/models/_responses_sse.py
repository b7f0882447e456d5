"""A Responses API response as the API streams it (``stream: true``): server-sent events.

The order is the API's: ``response.created`` and ``response.in_progress`` (the response with
status ``in_progress`` and no output), then for each output item ``response.output_item.added``
(the item with nothing in it yet), its content (for a message, each part's
``content_part.added``, its ``output_text.delta`` or ``refusal.delta`` pieces, the part's
``.done`` events; for a function call, ``function_call_arguments.delta`` pieces and
``.done``), ``response.output_item.done`` with the whole item, and last the terminal event:
``response.completed``, ``response.incomplete`` or ``response.failed``, carrying the whole
response. Every event has a ``sequence_number`` and is checked against the SDK's
``ResponseStreamEvent`` union. An error that breaks the stream off is an ``error`` event right
after ``response.created``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from openai.types.responses import ResponseStreamEvent

from ._openai_fake import pieces, shaped

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete"}


def events(response: dict[str, Any], *, error: dict[str, Any] | None = None) -> bytes:
    """The stream of ``response`` (a whole response body); with ``error`` (``code`` and
    ``message``), the stream breaks off with it instead."""
    seq = itertools.count()
    out: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": next(seq), **fields}
        shaped(event, ResponseStreamEvent, f"streamed {kind}")
        out.append(event)

    start = {**response, "status": "in_progress", "output": [], "usage": None}
    start.pop("incomplete_details", None)
    emit("response.created", response=start)
    if error is not None:
        emit("error", code=error["code"], message=error["message"], param=None)
        return _encode(out)
    emit("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        for kind, fields in _item_events(index, item):
            emit(kind, **fields)
    terminal = _TERMINAL.get(response["status"], "response.failed")
    emit(terminal, response=response)
    return _encode(out)


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    where = {"output_index": index}
    kind = item["type"]
    if kind == "message":
        added = {**item, "content": [], "status": "in_progress"}
        yield "response.output_item.added", {**where, "item": added}
        at = {**where, "item_id": item["id"]}
        for c, part in enumerate(item["content"]):
            at_part = {**at, "content_index": c}
            if part["type"] == "output_text":
                empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield "response.content_part.added", {**at_part, "part": empty}
                for piece in pieces(part["text"]):
                    yield "response.output_text.delta", {**at_part, "delta": piece, "logprobs": []}
                yield "response.output_text.done", {**at_part, "text": part["text"], "logprobs": []}
            else:
                yield "response.content_part.added", {**at_part, "part": {**part, "refusal": ""}}
                for piece in pieces(part["refusal"]):
                    yield "response.refusal.delta", {**at_part, "delta": piece}
                yield "response.refusal.done", {**at_part, "refusal": part["refusal"]}
            yield "response.content_part.done", {**at_part, "part": part}
    elif kind == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        yield "response.output_item.added", {**where, "item": added}
        at = {**where, "item_id": item["id"]}
        for piece in pieces(item["arguments"]):
            yield "response.function_call_arguments.delta", {**at, "delta": piece}
        yield "response.function_call_arguments.done", {**at, "arguments": item["arguments"]}
    else:
        added = {**item, "summary": []} if kind == "reasoning" else item
        yield "response.output_item.added", {**where, "item": added}
    yield "response.output_item.done", {**where, "item": item}


def _encode(out: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in out
    )
