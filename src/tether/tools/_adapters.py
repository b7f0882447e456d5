"""What code that makes tools from another description (an MCP server's tool list, a
framework's tools) shares with ``@tool``: the options a tool is declared with, the
signature of a ``verify`` function and the validator of arguments against a JSON schema.
"""

from __future__ import annotations

from ._options import ToolOptions as ToolOptions
from ._options import VerifyFunction as VerifyFunction
from ._schema_tool import ArgsValidator as ArgsValidator
