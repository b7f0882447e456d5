"""A tool result given as content blocks the model reads as they are (text, images, documents).

A tool's return value is normally encoded as JSON and sent as one text block. A tool that has
an image to show (a screenshot, a chart), a document (a PDF), or text it wants kept apart
returns ``ContentBlocks([...])`` instead: the blocks go into the ``tool_result`` unchanged.
They are journaled like any result (in the blob store when large) and replayed exactly.
With ``error=True`` the blocks are an error result (``is_error``), the model reading why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import msgspec

from .._errors import ToolError

BLOCK_TYPES = frozenset({"text", "image", "document", "search_result"})
"""Block types a ``tool_result`` may hold (the Messages API's rule)."""

_SOURCES = frozenset({"base64", "url", "text", "content", "file"})


@final
class ContentBlocks:
    """Content blocks to send as a tool's result, as they are.

    Args:
        blocks: Messages API blocks: ``{"type": "text", "text": ...}``, ``{"type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": ...}}``,
            ``{"type": "document", "source": {...}}``, ``{"type": "search_result", ...}``.
            Other keys (``cache_control``, ``citations``, ``title``) are kept.
        error: the blocks say why the call failed: an error result the model reads as given
            (a known failure, never run again on its own).

    Raises:
        ToolError: a block is not one of those, lacks its ``text`` or ``source``, or is not
            JSON-able (raised when the tool returns it, naming the tool).
    """

    __slots__ = ("blocks", "error")

    def __init__(self, blocks: Sequence[dict[str, Any]], *, error: bool = False) -> None:
        self.blocks = list(blocks)
        self.error = bool(error)

    def __repr__(self) -> str:
        error = ", error=True" if self.error else ""
        return f"ContentBlocks({[b.get('type') for b in self.blocks]!r}{error})"

    def checked(self, tool: str) -> list[dict[str, Any]]:
        """The blocks as plain JSON values, checked.

        Raises:
            ToolError: naming ``tool``, the block's index and the problem.
        """
        if not self.blocks:
            raise ToolError(tool, "ContentBlocks needs at least one block")
        for index, block in enumerate(self.blocks):
            problem = _problem(block)
            if problem is not None:
                raise ToolError(tool, f"result block {index}: {problem}")
        try:
            plain: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(self.blocks))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ToolError(tool, f"result blocks cannot be encoded as JSON: {exc}") from exc
        return plain


def _problem(block: object) -> str | None:
    if not isinstance(block, dict):
        return f"must be a dict, got {type(block).__name__}"
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        return f"type must be one of {', '.join(sorted(BLOCK_TYPES))}, got {kind!r}"
    if kind == "text" and not isinstance(block.get("text"), str):
        return "a text block needs a string 'text'"
    if kind in ("image", "document"):
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") not in _SOURCES:
            return f"an {kind} block needs a 'source' with a type of {sorted(_SOURCES)}"
    return None
