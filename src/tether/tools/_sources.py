"""Sources of tools registered when a supervisor opens, rather than when the code is imported.

An MCP server's tools can only be known by asking the server, which is async and needs a
connection that lives as long as the calls do. A ``ToolSource`` is such a provider: added to a
``ToolRegistry`` (``add_source``), it registers its tools when a ``Supervisor`` opens the
registry's sources and keeps what the calls need until the supervisor closes.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._registry import ToolRegistry


class ToolSource(Protocol):
    """Registers tools into a registry and holds their resources open (``tether.mcp``)."""

    def opened(self, registry: ToolRegistry) -> AbstractAsyncContextManager[object]:
        """An async context manager: on entry, register this source's tools into
        ``registry`` (replacing the ones it registered there before); on exit, release what
        their calls needed (connections, processes)."""
        ...
