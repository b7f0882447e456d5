"""tether.models: the model seam and its adapters.

A ``Model`` is called with Anthropic Messages-API shaped plain dicts and returns a
``ModelReply`` of plain-dict content blocks. ``ScriptedModel`` answers deterministically from a
script (tests, demos, crash matrices); ``AnthropicModel`` calls Claude through the official SDK
and ``OpenAIModel`` OpenAI's API or a server that speaks it (vLLM, Ollama, ...) through the
``openai`` SDK (an optional extra); each SDK is imported only when first needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import on_demand as _on_demand
from .._public import publish as _publish
from ._base import BLOCK_TYPES as BLOCK_TYPES
from ._base import Model as Model
from ._base import ModelReply as ModelReply
from ._base import SystemPrompt as SystemPrompt
from ._base import check_reply_blocks as check_reply_blocks
from ._base import text_sink as text_sink
from ._scripted import ScriptedModel as ScriptedModel

ON_DEMAND = {"AnthropicModel": "tether.models._anthropic", "OpenAIModel": "tether.models._openai"}
"""The adapters, imported when first used (each SDK only when first called)."""

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel as AnthropicModel
    from ._openai import OpenAIModel as OpenAIModel
else:
    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})


__all__ = [
    "BLOCK_TYPES",
    "AnthropicModel",
    "Model",
    "ModelReply",
    "OpenAIModel",
    "ScriptedModel",
    "SystemPrompt",
    "check_reply_blocks",
    "text_sink",
]

_publish(__name__, globals(), __all__)
