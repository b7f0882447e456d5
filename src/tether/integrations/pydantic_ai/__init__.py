"""pydantic-ai agents as tether runs (the ``pydantic-ai`` extra).

``TetherAgent(agent, tools={...}, deps=...)`` wraps an existing ``pydantic_ai.Agent``; its
``model`` and ``tools`` go to a ``Supervisor`` or a ``WorkerApp``, and each run of them is a
run of the agent: its model requests and tool calls journaled intent before act, replayed
from the journal on resume (the agent's loop runs again, answered from the journal up to
where it stopped), each tool under its replay policy, approvals at tether's gate, budgets and
the pinned manifest applied. The mechanism is in ``tether.integrations._steps``; pydantic-ai
is reached only through its public interfaces (``Agent.run``, capabilities, toolsets).

Importing this module checks the installed pydantic-ai against the supported versions and
raises ``tether.integrations.FrameworkVersionError`` naming both when it is outside them.
"""

from __future__ import annotations

from .._versions import require as _require

SUPPORTED = (">=2.68", "<3")
"""The pydantic-ai versions this integration supports."""

PYDANTIC_AI_VERSION = _require(
    "pydantic-ai-slim", __name__, minimum=SUPPORTED[0][2:], below=SUPPORTED[1][1:]
)

from ..._public import publish as _publish  # noqa: E402
from ._agent import AgentStepModel as AgentStepModel  # noqa: E402
from ._agent import TetherAgent as TetherAgent  # noqa: E402

__all__ = [
    "PYDANTIC_AI_VERSION",
    "SUPPORTED",
    "AgentStepModel",
    "TetherAgent",
]

_publish(__name__, globals(), __all__)
