"""Tools from MCP servers, as durable tools with replay policies (the ``mcp`` extra).

``MCPServer`` registers the tools of one server (a command spoken to over stdio, or a
streamable HTTP URL) into a ``ToolRegistry``: each tool's input schema is the server's and is
pinned by runs like any tool's; its replay policy comes from the server's annotations only if
the application trusts the server, else ``escalate`` unless ``ToolOptions`` says otherwise.
Every call carries its idempotency key in the request's ``_meta`` under
``IDEMPOTENCY_KEY_META``.

The full table of policies is in ``_policy``; how calls end, in ``_server``; how results are
mapped, in ``_results``.
"""

from __future__ import annotations

from .._public import publish as _publish
from ..tools._adapters import ToolOptions as ToolOptions
from ..tools._adapters import VerifyFunction as VerifyFunction
from ._link import IDEMPOTENCY_KEY_META as IDEMPOTENCY_KEY_META
from ._link import MCPServerUnavailableError as MCPServerUnavailableError
from ._policy import derive_policy as derive_policy
from ._results import tether_result as tether_result
from ._server import MCPServer as MCPServer

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "MCPServer",
    "MCPServerUnavailableError",
    "ToolOptions",
    "VerifyFunction",
    "derive_policy",
    "tether_result",
]

_publish(__name__, globals(), __all__)
