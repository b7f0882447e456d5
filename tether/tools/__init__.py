"""tether.tools: not yet implemented in this release; the package reserves the name."""

from __future__ import annotations

__all__: list[str] = []
