"""tether.models: the model seam and its adapters.

A ``Model`` is called with Anthropic Messages-API shaped plain dicts and returns a
``ModelReply`` of plain-dict content blocks; ``Message``, ``ContentBlock`` and
``ToolDefinition`` (``TypedDict``s, with a ``Literal`` for each block's ``type``) say what they
hold, so a type checker catches a mistyped block, and ``OpaqueBlock`` is a block of a type
tether does not know, kept as it came. ``ScriptedModel`` answers deterministically from a
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
from ._messages import KNOWN_TYPES as KNOWN_TYPES
from ._messages import AgentStepBlock as AgentStepBlock
from ._messages import Base64Source as Base64Source
from ._messages import Blocks as Blocks
from ._messages import CacheControl as CacheControl
from ._messages import ContentBlock as ContentBlock
from ._messages import Conversation as Conversation
from ._messages import DocumentBlock as DocumentBlock
from ._messages import FileSource as FileSource
from ._messages import ImageBlock as ImageBlock
from ._messages import KnownBlock as KnownBlock
from ._messages import Message as Message
from ._messages import OpaqueBlock as OpaqueBlock
from ._messages import OpenAIItemBlock as OpenAIItemBlock
from ._messages import OpenAIReasoningBlock as OpenAIReasoningBlock
from ._messages import OpenAIReasoningTextBlock as OpenAIReasoningTextBlock
from ._messages import OpenAIRefusalBlock as OpenAIRefusalBlock
from ._messages import PlainTextSource as PlainTextSource
from ._messages import RedactedThinkingBlock as RedactedThinkingBlock
from ._messages import Role as Role
from ._messages import SearchResultBlock as SearchResultBlock
from ._messages import Source as Source
from ._messages import TextBlock as TextBlock
from ._messages import ThinkingBlock as ThinkingBlock
from ._messages import ToolDefinition as ToolDefinition
from ._messages import ToolResultBlock as ToolResultBlock
from ._messages import ToolUseBlock as ToolUseBlock
from ._messages import URLSource as URLSource
from ._messages import blocks_from as blocks_from
from ._messages import blocks_of as blocks_of
from ._messages import is_known as is_known
from ._messages import message_of as message_of
from ._messages import messages_of as messages_of
from ._messages import text_of as text_of
from ._messages import tool_uses as tool_uses

ON_DEMAND = {
    "AnthropicModel": "tether.models._anthropic",
    "OpenAIModel": "tether.models._openai",
    "ScriptedModel": "tether.models._scripted",
    "StoppedAnswer": "tether.models._scripted",
}
"""The models, imported when first used (each SDK only when first called): reading a journal
needs the message types alone."""

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel as AnthropicModel
    from ._openai import OpenAIModel as OpenAIModel
    from ._scripted import ScriptedModel as ScriptedModel
    from ._scripted import StoppedAnswer as StoppedAnswer
else:
    __getattr__ = _on_demand(__name__, globals(), ON_DEMAND)


def __dir__() -> list[str]:
    return sorted({*globals(), *ON_DEMAND})


__all__ = [
    "BLOCK_TYPES",
    "KNOWN_TYPES",
    "AgentStepBlock",
    "AnthropicModel",
    "Base64Source",
    "Blocks",
    "CacheControl",
    "ContentBlock",
    "Conversation",
    "DocumentBlock",
    "FileSource",
    "ImageBlock",
    "KnownBlock",
    "Message",
    "Model",
    "ModelReply",
    "OpaqueBlock",
    "OpenAIItemBlock",
    "OpenAIModel",
    "OpenAIReasoningBlock",
    "OpenAIReasoningTextBlock",
    "OpenAIRefusalBlock",
    "PlainTextSource",
    "RedactedThinkingBlock",
    "Role",
    "ScriptedModel",
    "SearchResultBlock",
    "Source",
    "StoppedAnswer",
    "SystemPrompt",
    "TextBlock",
    "ThinkingBlock",
    "ToolDefinition",
    "ToolResultBlock",
    "ToolUseBlock",
    "URLSource",
    "blocks_from",
    "blocks_of",
    "check_reply_blocks",
    "is_known",
    "message_of",
    "messages_of",
    "text_of",
    "text_sink",
    "tool_uses",
]

_publish(__name__, globals(), __all__)
