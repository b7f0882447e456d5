"""An MCP tool result as a tether tool result: a value, content blocks, or an error the model reads.

======================================  ==================================================
MCP result                              tether result
======================================  ==================================================
``isError: true``                       an error result (``ContentBlocks(error=True)``) with
                                        the content mapped as below; the model reads why
``structuredContent``, all content text  the structured value (JSON, as a local tool's
                                        return value); the text is its serialization
one text block                          that text
anything else                           ``ContentBlocks``, one block each:
- text                                  a text block
- image (png, jpeg, gif, webp)          an image block (base64)
- embedded text resource                a text block headed ``[resource URI]``
- embedded blob: image / PDF            an image / a document block (base64)
- audio, a resource link, other blobs   a text block saying what it was (the model cannot
                                        read it); a link gives its URI
no content at all                       ``""``
======================================  ==================================================
"""

from __future__ import annotations

from typing import Any

from mcp import types

from ..tools import ContentBlocks

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Image types the Messages API reads."""


def tether_result(result: types.CallToolResult) -> Any:
    """The value (or ``ContentBlocks``) a tool from an MCP server returns for ``result``."""
    blocks = [_block(item) for item in result.content]
    if result.isError:
        if not blocks:
            blocks = [_text("the tool reported an error and said nothing more")]
        return ContentBlocks(blocks, error=True)
    if result.structuredContent is not None and all(b["type"] == "text" for b in blocks):
        return result.structuredContent
    if not blocks:
        return ""
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return blocks[0]["text"]
    return ContentBlocks(blocks)


def error_blocks(message: str) -> ContentBlocks:
    """An error result saying ``message`` (a server that refused the request)."""
    return ContentBlocks([_text(message)], error=True)


def _block(item: types.ContentBlock) -> dict[str, Any]:
    if isinstance(item, types.TextContent):
        return _text(item.text)
    if isinstance(item, types.ImageContent):
        if item.mimeType in IMAGE_TYPES:
            return _base64("image", item.mimeType, item.data)
        return _text(f"[an image of type {item.mimeType} the model cannot read was left out]")
    if isinstance(item, types.AudioContent):
        return _text(f"[audio ({item.mimeType}) the model cannot hear was left out]")
    if isinstance(item, types.ResourceLink):
        about = f" ({item.mimeType})" if item.mimeType else ""
        said = f": {item.description}" if item.description else ""
        return _text(f"[resource link {item.name}{about}] {item.uri}{said}")
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return _text(f"[resource {resource.uri}]\n{resource.text}")
        kind = resource.mimeType or "application/octet-stream"
        if kind in IMAGE_TYPES:
            return _base64("image", kind, resource.blob)
        if kind == "application/pdf":
            return _base64("document", kind, resource.blob)
        return _text(f"[resource {resource.uri} ({kind}) the model cannot read was left out]")
    return _text(f"[content of type {getattr(item, 'type', '?')!r} was left out]")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _base64(kind: str, media_type: str, data: str) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}}
