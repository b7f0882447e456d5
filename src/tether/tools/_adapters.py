"""What code that makes tools from another description (an MCP server's tool list, a
framework's tools) shares with ``@tool``: the options a tool is declared with, the
signature of a ``verify`` function, the validator of arguments against a JSON schema, and
which tool's attempt the runtime is running (``attempting``, set by the runtime; an adapter asks
``is_attempting`` before it binds an error to the attempt).
"""

from __future__ import annotations

from ._context import attempting as attempting
from ._context import is_attempting as is_attempting
from ._options import ToolOptions as ToolOptions
from ._options import VerifyFunction as VerifyFunction
from ._schema_tool import ArgsValidator as ArgsValidator
