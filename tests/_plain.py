"""Content blocks as plain JSON, for tests that look inside them.

A reply's blocks are typed (``ContentBlock``: a union a type checker narrows by ``type``); a
test that knows what it built reads them as the JSON they are.
"""

from __future__ import annotations

from typing import Any


def plain(value: object) -> Any:
    """``value`` (blocks, messages, results) as itself, typed as plain JSON (nothing is
    copied)."""
    return value
