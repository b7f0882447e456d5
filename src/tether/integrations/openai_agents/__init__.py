"""OpenAI Agents SDK agents as tether runs (the ``openai-agents`` extra).

``TetherRunner(agent, tools={...}, context=...)`` gives the ``model`` and ``tools`` a
``Supervisor`` or ``WorkerApp`` takes, and ``await runner.run(agent, input, supervisor=sup,
run_id=...)`` is ``Runner.run(agent, input)`` with the run durable: each model request and
tool call journaled intent before act, replayed from the journal on resume (``Runner.run``
runs again, answered from the journal up to where it stopped), each function tool under its
replay policy, ``needs_approval`` at tether's gate, handoffs journaled as calls, input
guardrails' outcomes journaled once. The mechanism is in ``tether.integrations._steps``; the
SDK is reached only through its public interfaces (``Runner.run``, ``Model``,
``FunctionTool``, ``InputGuardrail``, handoffs).

Importing this module checks the installed SDK against the supported versions and raises
``FrameworkVersionError`` naming both when it is outside them.
"""

from __future__ import annotations

from .._versions import require as _require

SUPPORTED = (">=0.24", "<0.25")
"""The ``openai-agents`` versions this integration supports."""

OPENAI_AGENTS_VERSION = _require(
    "openai-agents", __name__, minimum=SUPPORTED[0][2:], below=SUPPORTED[1][1:]
)

from ..._public import publish as _publish  # noqa: E402
from ._runner import AgentsStepModel as AgentsStepModel  # noqa: E402
from ._runner import TetherRunner as TetherRunner  # noqa: E402
from ._runner import idempotency_key as idempotency_key  # noqa: E402

__all__ = [
    "OPENAI_AGENTS_VERSION",
    "SUPPORTED",
    "AgentsStepModel",
    "TetherRunner",
    "idempotency_key",
]

_publish(__name__, globals(), __all__)
