"""Agent frameworks on tether: their agents' runs as tether runs.

- ``tether.integrations.pydantic_ai`` (the ``pydantic-ai`` extra): ``TetherAgent``, a
  ``pydantic_ai.Agent`` whose runs are tether runs.
- ``tether.integrations.openai_agents`` (the ``openai-agents`` extra): ``TetherRunner``, a
  drop-in for the OpenAI Agents SDK's ``Runner.run``.

Both take the same way (``_steps``): tether's one agent loop drives the run, and each model
call of it replays the framework's own loop from the journal up to its next step. Neither
module is imported by ``import tether``; each checks its framework's version on import.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._versions import FrameworkVersionError as FrameworkVersionError

__all__ = ["FrameworkVersionError"]

_publish(__name__, globals(), __all__)
