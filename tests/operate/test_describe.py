"""How ``describe`` puts a tool's result in one line (``tether show``, the console)."""

from __future__ import annotations

from tether.journal import ToolResult
from tether.operate import describe


def test_a_result_of_content_blocks_reads_as_their_text() -> None:
    blocks = [
        {"type": "text", "text": "MCP server 'raw' answered with an error: db down"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
    ]
    event = ToolResult(call_id="c1", ok=False, content=blocks, blocks=True)
    assert describe(event, {"c1": "write"}) == (
        "write [c1] error: MCP server 'raw' answered with an error: db down [image]"
    )


def test_a_value_that_only_looks_like_blocks_is_shown_as_json() -> None:
    value = [{"type": "text", "text": "a row of the tool's own data"}]
    event = ToolResult(call_id="c1", ok=True, content=value)
    assert (
        describe(event, {}) == '[c1] ok: [{"type":"text","text":"a row of the tool\'s own data"}]'
    )
