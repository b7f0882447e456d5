"""What an application sets for one tool whose contract comes from elsewhere.

An MCP server's tools (``MCPServer(tools={...})``) and an agent framework's tools
(``tether.integrations``) are registered from a schema someone else wrote; ``ToolOptions`` is
what the application adds to each: its replay policy, an approval gate, a timeout.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._context import ToolContext
from ._policy import ApprovalTimeout, ApprovalTimeoutName, PolicyName, ReplayPolicy

VerifyFunction = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
"""``await verify(arguments, ctx)``: the call's result if the dangling call landed, else
``None`` (it is run again with the same idempotency key)."""


@dataclass(frozen=True, kw_only=True)
class ToolOptions:
    """Overrides for one tool of an MCP server or an agent framework, by its name.

    Attributes:
        policy: the replay policy, whatever the server's annotations say (see
            ``tether.mcp``'s table for what applies without it; a framework's tool without
            one is ``verify`` when ``verify`` is given, else ``escalate``, as local tools
            are: ``own_policy``).
        verify: ``await verify(arguments, ctx)``, for policy ``verify`` (implied when the
            tool is not known to be safe to repeat): the result if the call landed, else
            ``None``.
        approval, approval_timeout, on_approval_timeout: an approval gate, as for local tools.
        timeout: seconds one attempt may run (its outcome is then unknown).
        retries: further attempts after an unknown outcome, an unreachable server or a
            timeout; ``None`` takes the server's ``retries`` (none for a framework's tool).
        version: the version the tool's contract is pinned under (the server does not say).
        cache_control: put on the tool's definition, as for local tools.
    """

    policy: ReplayPolicy | PolicyName | None = None
    verify: VerifyFunction | None = None
    approval: bool = False
    approval_timeout: float | None = None
    on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None
    timeout: float | None = None
    retries: int | None = None
    version: str = "1"
    cache_control: dict[str, Any] | None = None

    def own_policy(self) -> ReplayPolicy | PolicyName:
        """The policy of a tool nothing else says anything of (an agent framework's): the
        one given, else ``verify`` when a ``verify`` function is given, else ``escalate``."""
        if self.policy is not None:
            return self.policy
        return ReplayPolicy.VERIFY if self.verify is not None else ReplayPolicy.ESCALATE
