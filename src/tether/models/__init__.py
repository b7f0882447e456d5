"""tether.models: the model seam and its adapters.

A ``Model`` is called with Anthropic Messages-API shaped plain dicts and returns a
``ModelReply`` of plain-dict content blocks. ``ScriptedModel`` answers deterministically from a
script (tests, demos, crash matrices); ``AnthropicModel`` calls Claude through the official SDK
and ``OpenAIModel`` OpenAI's API or a server that speaks it (vLLM, Ollama, ...) through the
``openai`` SDK (an optional extra); each SDK is imported only when first needed.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._anthropic import AnthropicModel as AnthropicModel
from ._base import BLOCK_TYPES as BLOCK_TYPES
from ._base import Model as Model
from ._base import ModelReply as ModelReply
from ._base import SystemPrompt as SystemPrompt
from ._base import check_reply_blocks as check_reply_blocks
from ._base import text_sink as text_sink
from ._openai import OpenAIModel as OpenAIModel
from ._scripted import ScriptedModel as ScriptedModel

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
