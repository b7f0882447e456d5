"""The Messages-API shapes at the model seam, as ``TypedDict``s: a message, its content blocks
and a tool definition.

A run's conversation is Anthropic Messages shaped (``{"role", "content"}``, content a string or
a list of blocks, each with a ``type``), and it stays plain dicts at run time: what a model
returns is journaled as it came and sent back byte for byte. These types only tell a type
checker what each shape holds, so a typo in a block type (``"tool_usee"``) or a missing field
is an error before anything runs, where a ``dict[str, Any]`` let it pass.

Known and unknown blocks. Every block type tether reads or writes has a ``TypedDict`` whose
``type`` is a ``Literal``; together they are ``KnownBlock``, a union mypy narrows by
``block["type"] == "tool_use"`` (and where comparing with a type no member has is an error).
A conversation may also hold blocks tether does not know: server tools' calls and results
(``server_tool_use``, ``web_search_tool_result``), types a newer API adds, and whatever an
older journal recorded. Those are ``OpaqueBlock``: a ``dict[str, object]`` that a dict literal
is not (it is made on purpose, ``OpaqueBlock({...})``, where an adapter takes blocks from an
API as they came), so a mistyped literal cannot hide in it. ``ContentBlock``, what a message
holds, is either; ``is_known`` tells them apart, and ``tool_uses`` picks out the calls.
``Conversation`` and ``Blocks`` are lists of messages and of blocks for fields msgspec may
convert (a run's state, a ``ModelReply``): typed to a type checker, plain lists to msgspec.

Nothing here checks at run time what a journal or an HTTP response holds: records decode as
plain dicts (a journal written by an older or newer tether still replays), ``messages_of``
names them without copying, and ``check_reply_blocks`` (``tether.models``) is the one check of
an answer's blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    NewType,
    NotRequired,
    TypeAlias,
    TypedDict,
    TypeGuard,
    cast,
)

Role: TypeAlias = Literal["user", "assistant"]
"""Who said a message."""


class CacheControl(TypedDict):
    """A prompt-caching breakpoint: ``{"type": "ephemeral"}``, optionally with a ``ttl``
    (``"5m"``, ``"1h"``). Other APIs have no counterpart, and their adapters drop it."""

    type: str
    ttl: NotRequired[str]


class TextBlock(TypedDict):
    """``{"type": "text", "text": ...}``: text, from a person, a tool or the model.

    ``citations`` are the API's, kept as they came. ``item_id``, ``phase`` and
    ``annotations`` are kept by ``OpenAIModel``'s Responses API translation, which sends the
    text back in the output item it came from.
    """

    type: Literal["text"]
    text: str
    citations: NotRequired[list[Any]]
    cache_control: NotRequired[CacheControl]
    item_id: NotRequired[str]
    phase: NotRequired[str]
    annotations: NotRequired[list[Any]]


class ToolUseBlock(TypedDict):
    """``{"type": "tool_use", "id", "name", "input"}``: a call the model asks the runtime to
    make; its ``id`` is unique within the run, and its result answers it by ``tool_use_id``.

    ``input_error`` says why arguments that came as text (another API's) are not a JSON object;
    ``input`` is then empty and the runtime answers the call with an error instead of running
    it. ``item_id`` is the Responses API's id of the call's item; ``call_id`` a framework's own
    id for the call (``tether.integrations``).
    """

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    input_error: NotRequired[str]
    item_id: NotRequired[str]
    call_id: NotRequired[str]
    cache_control: NotRequired[CacheControl]


class Base64Source(TypedDict):
    """An image's or a document's bytes: ``{"type": "base64", "media_type", "data"}``."""

    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(TypedDict):
    """An image or a document the API fetches: ``{"type": "url", "url"}``."""

    type: Literal["url"]
    url: str


class PlainTextSource(TypedDict):
    """A document's text: ``{"type": "text", "media_type": "text/plain", "data"}``."""

    type: Literal["text"]
    media_type: NotRequired[str]
    data: str


class FileSource(TypedDict):
    """A file uploaded to the API before: ``{"type": "file", "file_id"}``."""

    type: Literal["file"]
    file_id: str


Source: TypeAlias = Base64Source | URLSource | PlainTextSource | FileSource
"""Where an image's or a document's content comes from."""


class ImageBlock(TypedDict):
    """``{"type": "image", "source": ...}``: an image in a message or a tool's result."""

    type: Literal["image"]
    source: Source
    cache_control: NotRequired[CacheControl]


class DocumentBlock(TypedDict):
    """``{"type": "document", "source": ...}``: a PDF or a text document; ``title`` names it."""

    type: Literal["document"]
    source: Source
    title: NotRequired[str]
    context: NotRequired[str]
    citations: NotRequired[dict[str, Any]]
    cache_control: NotRequired[CacheControl]


class SearchResultBlock(TypedDict):
    """``{"type": "search_result", "source", "title", "content"}``: a result a tool found,
    which the model can cite; ``content`` is text blocks."""

    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlock]
    citations: NotRequired[dict[str, Any]]
    cache_control: NotRequired[CacheControl]


class ToolResultBlock(TypedDict):
    """``{"type": "tool_result", "tool_use_id", "content", "is_error"}``: the answer to the
    ``tool_use`` block whose ``id`` is ``tool_use_id``, in the user message that follows it.

    ``content`` is text, or blocks (text, images, documents, search results, and types a
    newer API allows).
    """

    type: Literal["tool_result"]
    tool_use_id: str
    content: NotRequired[str | list[ContentBlock]]
    is_error: NotRequired[bool]
    cache_control: NotRequired[CacheControl]


class ThinkingBlock(TypedDict):
    """``{"type": "thinking", "thinking", "signature"}``: the model's reasoning, sent back as
    it came (the API checks the signature)."""

    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(TypedDict):
    """``{"type": "redacted_thinking", "data"}``: reasoning the API sealed, sent back as it
    came."""

    type: Literal["redacted_thinking"]
    data: str


class OpenAIReasoningBlock(TypedDict):
    """``{"type": "openai_reasoning", "item": ...}``: a Responses API reasoning item, kept
    whole and sent back in its place (the API pairs it with the item that followed it)."""

    type: Literal["openai_reasoning"]
    item: dict[str, Any]


class OpenAIItemBlock(TypedDict):
    """``{"type": "openai_item", "item": ...}``: any other Responses API output item, kept
    whole and sent back as it came."""

    type: Literal["openai_item"]
    item: dict[str, Any]


class OpenAIRefusalBlock(TypedDict):
    """``{"type": "openai_refusal", "refusal": ...}``: an OpenAI model's refusal (with the
    item it came in, on the Responses API)."""

    type: Literal["openai_refusal"]
    refusal: str
    item_id: NotRequired[str]
    phase: NotRequired[str]


class OpenAIReasoningTextBlock(TypedDict):
    """``{"type": "openai_reasoning_content", "text": ...}``: the reasoning text some
    Chat Completions servers add (``reasoning_content``), journaled, not sent back."""

    type: Literal["openai_reasoning_content"]
    text: str


class AgentStepBlock(TypedDict):
    """``{"type": "agent_step", "response": ...}``: a framework's own response for one step
    of its agent run, as it serialized it (``None`` for a step that made no request), with
    values kept beside it (``captures``); only ``tether.integrations`` reads it back."""

    type: Literal["agent_step"]
    response: Any
    captures: NotRequired[dict[str, Any]]


KnownBlock: TypeAlias = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | OpenAIReasoningBlock
    | OpenAIItemBlock
    | OpenAIRefusalBlock
    | OpenAIReasoningTextBlock
    | AgentStepBlock
)
"""A block of a type tether knows; ``block["type"]`` tells which."""

OpaqueBlock = NewType("OpaqueBlock", dict[str, object])
"""A block of a type tether does not know (``server_tool_use``, a server tool's result, a type a
newer API adds), kept as it came. Made on purpose, ``OpaqueBlock(block)``, so a dict literal
with a mistyped ``type`` is not one."""

ContentBlock: TypeAlias = KnownBlock | OpaqueBlock
"""One block of a message's content."""

KNOWN_TYPES: frozenset[str] = frozenset(
    {
        "text",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "image",
        "document",
        "search_result",
        "openai_reasoning",
        "openai_item",
        "openai_refusal",
        "openai_reasoning_content",
        "agent_step",
    }
)
"""The ``type`` of every ``KnownBlock`` (a test keeps the two alike)."""


class Message(TypedDict):
    """``{"role": "user" | "assistant", "content": ...}``: one turn of a conversation.

    ``content`` is text (a shorthand for one text block) or a list of blocks. A user message
    holds what a person said and the results of the previous turn's calls; an assistant
    message is a model's answer (``ModelReply.as_message``).
    """

    role: Role
    content: str | list[ContentBlock]


if TYPE_CHECKING:
    Conversation: TypeAlias = list[Message]
    Blocks: TypeAlias = list[ContentBlock]
else:
    # What msgspec is told, where a class that holds a conversation or blocks is converted or
    # decoded (a run's state inside a kept summary, a ModelReply): a list, whatever it holds.
    # A union of TypedDicts is one msgspec cannot decode, and would check what a journal or
    # an API gave, which must pass as it came.
    Conversation = list
    Blocks = list
"""``Conversation`` is a run's messages (``list[Message]``) and ``Blocks`` an answer's blocks
(``list[ContentBlock]``) to a type checker; at run time both are ``list``, so msgspec checks
nothing of what they hold."""


class ToolDefinition(TypedDict):
    """A tool as a model is told of it: ``{"name", "description", "input_schema"}`` (the
    Messages API's form; ``OpenAIModel`` translates it). ``description`` is left out when
    empty; ``cache_control`` marks a prompt-caching breakpoint."""

    name: str
    description: NotRequired[str]
    input_schema: dict[str, Any]
    cache_control: NotRequired[CacheControl]


def is_known(block: ContentBlock) -> TypeGuard[KnownBlock]:
    """Whether ``block`` is of a type tether knows (so ``block["type"]`` narrows it)."""
    return block.get("type") in KNOWN_TYPES


def blocks_of(message: Message) -> list[ContentBlock]:
    """A message's content blocks; none for text content (``content`` as a string)."""
    content = message.get("content")
    return content if isinstance(content, list) else []


def tool_uses(blocks: Iterable[ContentBlock]) -> list[ToolUseBlock]:
    """The ``tool_use`` blocks of ``blocks``, in order."""
    return [b for b in blocks if is_known(b) and b["type"] == "tool_use"]


def text_of(blocks: Iterable[ContentBlock]) -> list[str]:
    """The text of each ``text`` block of ``blocks``, in order."""
    return [b.get("text", "") for b in blocks if is_known(b) and b["type"] == "text"]


def messages_of(raw: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages as a journal decodes them (plain dicts), typed as the conversation they are.

    Nothing is checked or copied (the same list, the same dicts): a journal is read as it was
    written, blocks tether does not know included.
    """
    return cast("list[Message]", raw)


def message_of(raw: Mapping[str, Any]) -> Message:
    """One message as a journal decodes it, typed; nothing is checked or copied."""
    return cast("Message", raw)


def blocks_from(raw: Sequence[Mapping[str, Any]]) -> list[ContentBlock]:
    """Content blocks as an API or a journal gives them (plain dicts), typed; nothing is
    checked or copied (``check_reply_blocks`` checks an answer's)."""
    return cast("list[ContentBlock]", raw)
