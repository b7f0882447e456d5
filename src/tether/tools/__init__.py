"""Tools: async functions an agent may call, with the policies that make resuming them safe.

Create a ``ToolRegistry``, register ``async def`` functions with ``@registry.tool(...)``, and
pass the registry to the supervisor. Each tool's input schema comes from its signature, and
each declares a ``ReplayPolicy`` for a call that was started but has no recorded result.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._content import ContentBlocks as ContentBlocks
from ._context import ToolContext as ToolContext
from ._policy import ApprovalTimeout as ApprovalTimeout
from ._policy import ReplayPolicy as ReplayPolicy
from ._registry import ToolRegistry as ToolRegistry
from ._sources import ToolSource as ToolSource
from ._spec import ToolSpec as ToolSpec
from ._waits import Wait as Wait
from ._waits import sleep_for as sleep_for
from ._waits import sleep_until as sleep_until
from ._waits import start_child as start_child
from ._waits import wait_for as wait_for

__all__ = [
    "ApprovalTimeout",
    "ContentBlocks",
    "ReplayPolicy",
    "ToolContext",
    "ToolRegistry",
    "ToolSource",
    "ToolSpec",
    "Wait",
    "sleep_for",
    "sleep_until",
    "start_child",
    "wait_for",
]

_publish(__name__, globals(), __all__)
