"""The Messages API's rules beyond the shape of a body, and the fake's thinking signatures.

``check_request`` first checks the body's shape against the SDK's request types (see
``_shape``), then the rules the real API enforces that no type can say: how tool use
and tool results pair up across turns, which signatures a thinking block must carry, how many
cache breakpoints a request may set, and so on. Each check's docstring or comment names the
behaviour of the real API it mirrors; messages quote the real API's where known. Where the
fake is unsure what the API does it refuses (stricter is safe: code that passes here passes
there), and says so in the message.

``check_answer`` holds a scripted answer to what the request allowed the model to do (a tool
it was not given, a stop sequence it did not ask for), so a test cannot script an answer the
real model could never give.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from anthropic.types.content_block import ContentBlock
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)

from ._shape import Invalid, Path, check_shape

DEFAULT_SECRET = b"tether-fake-messages-api"
"""The key thinking signatures are made with. Every fake shares it by default, so a history
journaled against one fake (a run resumed in a new process) verifies against the next, as real
signatures verify across requests."""

TOOL_USE_ID = r"^[a-zA-Z0-9_-]+$"
SERVER_TOOL_USE_ID = r"^srvtoolu_[a-zA-Z0-9_]+$"
TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
MAX_CACHE_BREAKPOINTS = 4

ANSWER_BLOCK_TYPES = frozenset(
    tag
    for model in get_args(get_args(ContentBlock)[0])
    for tag in get_args(model.model_fields["type"].annotation)
)
"""Every block type the installed SDK's response ``ContentBlock`` union knows."""

SERVER_RESULT_TYPES = frozenset(t for t in ANSWER_BLOCK_TYPES if t.endswith("_tool_result"))
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_ASSISTANT_ONLY = SERVER_RESULT_TYPES | THINKING_TYPES | {"tool_use", "server_tool_use"}
_USER_ONLY = frozenset({"tool_result", "image", "document", "search_result"})
_THINKING_ON = frozenset({"enabled", "adaptive", "between_tools"})
_SERVER_TOOL_PREFIXES = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_")

_EXPECTED_THINKING = (
    "Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is "
    "enabled, a final `assistant` message must start with a thinking block (preceeding the "
    "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking "
    "blocks from previous turns. To avoid this requirement, disable `thinking`."
)


class ScriptError(AssertionError):
    """The test scripted an answer the real model could not give to that request."""


# -- signatures ---------------------------------------------------------------------------


def sign_thinking(thinking: str, secret: bytes = DEFAULT_SECRET) -> str:
    """The signature the fake gives a thinking block: HMAC-SHA256 over its text."""
    mac = hmac.new(secret, b"thinking\0" + thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def redacted_data(seed: str = "", secret: bytes = DEFAULT_SECRET) -> str:
    """Opaque ``redacted_thinking`` data: a nonce from ``seed`` and a MAC over it, base64."""
    nonce = hashlib.sha256(b"nonce\0" + seed.encode()).digest()[:16]
    mac = hmac.new(secret, b"redacted\0" + nonce, hashlib.sha256).digest()
    return base64.b64encode(nonce + mac).decode()


def thinking_is_signed(block: dict[str, Any], secret: bytes) -> bool:
    return hmac.compare_digest(str(block["signature"]), sign_thinking(block["thinking"], secret))


def redacted_is_intact(data: str, secret: bytes) -> bool:
    """Whether ``data`` is, byte for byte, what ``redacted_data`` issued under ``secret``."""
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return False
    if len(raw) != 48 or base64.b64encode(raw).decode() != data:
        return False
    mac = hmac.new(secret, b"redacted\0" + raw[:16], hashlib.sha256).digest()
    return hmac.compare_digest(raw[16:], mac)


def normalized(value: Any) -> Any:
    """JSON with ``None``-valued keys dropped: an omitted field and a null one are the same
    block to the API (the SDK sends what it parsed; callers often drop the nulls)."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def _as_sent(blocks: Sequence[dict[str, Any]]) -> list[Any]:
    # A caller may put a cache breakpoint on a block it sends back; the block is the same.
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in normalized(blocks)]


# -- what the fake knows about a request ----------------------------------------------------


@dataclass(frozen=True)
class Issued:
    """An answer the fake gave, as it would be sent back."""

    content: list[Any]
    stop_reason: str


@dataclass(frozen=True)
class Tools:
    """The tools a request defines, by who runs them."""

    client: frozenset[str] = frozenset()  # custom tools and client-run tools (bash, memory...)
    server: frozenset[str] = frozenset()  # names a server_tool_use may carry
    toolsets: bool = False
    defined: bool = False


@dataclass(frozen=True)
class Checked:
    """A request that passed every check."""

    body: dict[str, Any]
    stream: bool
    tools: Tools
    continues_pause: bool


@dataclass
class _Block:
    path: Path
    value: dict[str, Any]
    listed: bool  # from a content list (its fields' paths carry the type tag)

    @property
    def type(self) -> str:
        return str(self.value["type"])

    def field(self, name: str) -> Path:
        return (*self.path, self.type, name) if self.listed else self.path


@dataclass
class _Message:
    index: int
    role: str
    blocks: list[_Block]


@dataclass
class _Turn:
    role: str
    messages: list[_Message] = field(default_factory=list)

    @property
    def blocks(self) -> list[_Block]:
        return [b for m in self.messages for b in m.blocks]

    def has_results(self) -> bool:
        return any(b.type == "tool_result" for b in self.blocks)


# -- the request ----------------------------------------------------------------------------


def check_request(body: object, *, secret: bytes, issued: Sequence[Issued]) -> Checked:
    """Raise ``Invalid`` where the real API would answer 400; else what the fake needs."""
    stream = isinstance(body, dict) and body.get("stream") is True
    check_shape(body, MessageCreateParamsStreaming if stream else MessageCreateParamsNonStreaming)
    assert isinstance(body, dict)
    if body["max_tokens"] < 1:
        # The API takes 0 to pre-warm the prompt cache without an answer; the fake does not
        # model that, and refuses it like any other value below 1.
        raise Invalid(("max_tokens",), "Input should be greater than or equal to 1")
    tools = _check_tools(body.get("tools", []))
    _check_choice_and_thinking(body, tools)
    _check_system(body.get("system"))
    messages = _messages(body["messages"])
    _check_cache_breakpoints(body, messages)
    turns = _turns(messages)
    _check_history(turns, tools, secret, issued)
    thinking = body.get("thinking")
    _check_thinking_kept(turns, thinking["type"] if thinking else None, issued)
    return Checked(
        body=body,
        stream=stream,
        tools=tools,
        continues_pause=turns[-1].role == "assistant" and _paused(turns[-1], issued),
    )


def _paused(turn: _Turn, issued: Sequence[Issued]) -> bool:
    """Whether ``turn`` ends with an answer this fake gave with ``stop_reason: pause_turn``."""
    last = _as_sent([b.value for b in turn.messages[-1].blocks])
    return any(i.stop_reason == "pause_turn" and i.content == last for i in issued)


def _check_tools(tools: list[dict[str, Any]]) -> Tools:
    """Custom tools: a name matching ``^[a-zA-Z0-9_-]{1,64}$`` and an ``input_schema`` of
    ``type: object`` (the SDK's type also lets any dict through); names unique across tools
    (the API's "Tool names must be unique.")."""
    client: set[str] = set()
    server: set[str] = set()
    toolsets = False
    for index, tool in enumerate(tools):
        kind = tool.get("type") or "custom"
        name = tool.get("name")
        if kind == "custom":
            assert isinstance(name, str)
            if not re.fullmatch(TOOL_NAME, name):
                raise Invalid(
                    ("tools", index, kind, "name"), f"String should match pattern '{TOOL_NAME}'"
                )
            if tool["input_schema"].get("type") != "object":
                raise Invalid(
                    ("tools", index, kind, "input_schema", "type"), "Input should be 'object'"
                )
        if name is not None and (name in client or name in server):
            raise Invalid(("tools",), f"Tool names must be unique. Found '{name}' twice.")
        if "toolset" in kind:
            toolsets = True
        elif kind.startswith(_SERVER_TOOL_PREFIXES):
            server.add(str(name))
            if kind.startswith("code_execution_"):
                server.update({"bash_code_execution", "text_editor_code_execution"})
        elif name is not None:
            client.add(name)
    return Tools(frozenset(client), frozenset(server), toolsets, defined=bool(tools))


def _check_choice_and_thinking(body: dict[str, Any], tools: Tools) -> None:
    """``tool_choice`` needs tools and a forced choice needs thinking off; ``enabled`` thinking
    needs ``1024 <= budget_tokens < max_tokens`` (the SDK's docstring for ``budget_tokens``)."""
    choice = body.get("tool_choice")
    thinking = body.get("thinking")
    if choice is not None:
        if not tools.defined and choice["type"] != "none":
            raise Invalid(
                ("tool_choice",), "tool_choice may only be specified while providing tools."
            )
        if choice["type"] == "tool" and choice["name"] not in tools.client | tools.server:
            raise Invalid(
                ("tool_choice", "tool", "name"), f"Tool '{choice['name']}' is not in `tools`."
            )
        if thinking and thinking["type"] in _THINKING_ON and choice["type"] in ("any", "tool"):
            raise Invalid((), "Thinking may not be enabled when `tool_choice` forces tool use.")
    if thinking and thinking["type"] == "enabled":
        if thinking["budget_tokens"] < 1024:
            raise Invalid(
                ("thinking", "enabled", "budget_tokens"),
                "Input should be greater than or equal to 1024",
            )
        if body["max_tokens"] <= thinking["budget_tokens"]:
            raise Invalid(
                ("max_tokens",), "`max_tokens` must be greater than `thinking.budget_tokens`"
            )


def _check_system(system: object) -> None:
    if isinstance(system, list):
        for index, block in enumerate(system):
            if not block["text"]:
                raise Invalid(("system", index, "text"), "text content blocks must be non-empty")


def _messages(raw: list[dict[str, Any]]) -> list[_Message]:
    """Every message but an optional final assistant one needs content; text blocks need text
    that is not all whitespace; a final assistant message may not end in whitespace (the
    API's "final assistant content cannot end with trailing whitespace"); the first message is
    the user's. Blocks the model writes (thinking, tool_use, server tool blocks) belong in
    assistant messages and blocks only a caller sends (tool_result, image, document,
    search_result) in user ones. ``system`` messages inside ``messages``, which the SDK's types
    allow, are not modelled and refused."""
    if not raw:
        raise Invalid(("messages",), "at least one message is required")
    last = len(raw) - 1
    messages: list[_Message] = []
    for index, message in enumerate(raw):
        role, content = message["role"], message["content"]
        if role == "system":
            raise Invalid(
                ("messages", index, "role"),
                "`system` messages inside `messages` are not modelled by this fake; "
                "use the top-level `system` parameter",
            )
        if isinstance(content, str):
            text = {"type": "text", "text": content}
            blocks = [_Block(("messages", index, "content"), text, False)] if content else []
        else:
            blocks = [
                _Block(("messages", index, "content", j), b, True) for j, b in enumerate(content)
            ]
        if not blocks and not (index == last and role == "assistant"):
            raise Invalid(
                ("messages", index),
                "all messages must have non-empty content except for the optional final "
                "assistant message",
            )
        for block in blocks:
            if block.type == "text" and not block.value["text"]:
                raise Invalid(block.path, "text content blocks must be non-empty")
            if block.type == "text" and not block.value["text"].strip():
                raise Invalid(block.path, "text content blocks must contain non-whitespace text")
            wrong = _ASSISTANT_ONLY if role == "user" else _USER_ONLY
            if block.type in wrong:
                other = "assistant" if role == "user" else "user"
                raise Invalid(
                    block.path, f"`{block.type}` blocks may only appear in `{other}` messages"
                )
        end = blocks[-1].value if blocks else {}
        trailing = end.get("type") == "text" and end["text"] != end["text"].rstrip()
        if index == last and role == "assistant" and trailing:
            raise Invalid(
                blocks[-1].path, "final assistant content cannot end with trailing whitespace"
            )
        messages.append(_Message(index, role, blocks))
    if messages[0].role != "user":
        raise Invalid(("messages",), 'first message must use the "user" role')
    return messages


def _check_cache_breakpoints(body: dict[str, Any], messages: list[_Message]) -> None:
    """At most four ``cache_control`` breakpoints in tools, system and messages together (the
    API's "A maximum of 4 blocks with cache_control may be provided. Found 5."), a top-level
    ``cache_control`` counting as one more; and, as the prompt-caching docs require, a ``1h``
    breakpoint never after a ``5m`` one (in the order tools, system, messages)."""
    marks: list[tuple[Path, dict[str, Any]]] = []

    def mark(path: Path, block: object) -> None:
        if isinstance(block, dict) and block.get("cache_control") is not None:
            marks.append((path, block["cache_control"]))

    for index, tool in enumerate(body.get("tools", [])):
        mark(("tools", index), tool)
    if isinstance(body.get("system"), list):
        for index, block in enumerate(body["system"]):
            mark(("system", index), block)
    for message in messages:
        for block in message.blocks:
            mark(block.path, block.value)
            inner = block.value.get("content") if block.type == "tool_result" else None
            for index, part in enumerate(inner if isinstance(inner, list) else []):
                mark((*block.field("content"), index), part)
    mark((), body)
    if len(marks) > MAX_CACHE_BREAKPOINTS:
        raise Invalid(
            (),
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marks)}.",
        )
    short: Path | None = None
    for path, control in marks:
        if control.get("ttl", "5m") == "5m":
            short = path
        elif short is not None:
            raise Invalid(
                (*path, "cache_control", "ttl"),
                f"a ttl='1h' cache_control breakpoint may not come after a ttl='5m' one "
                f"(at {'.'.join(map(str, short)) or 'cache_control'})",
            )


def _turns(messages: list[_Message]) -> list[_Turn]:
    """Consecutive messages of one role are one turn, as the API combines them."""
    turns: list[_Turn] = []
    for message in messages:
        if not turns or turns[-1].role != message.role:
            turns.append(_Turn(message.role))
        turns[-1].messages.append(message)
    return turns


def _check_history(
    turns: list[_Turn], tools: Tools, secret: bytes, issued: Sequence[Issued]
) -> None:
    """Tool use across turns, as the API checks it.

    Every ``tool_use`` in an assistant turn is answered by exactly one ``tool_result`` in the
    next user turn, and every ``tool_result`` there answers one of them ("unexpected
    `tool_use_id` found in `tool_result` blocks" / "`tool_use` ids were found without
    `tool_result` blocks immediately after"); the results come before anything else in that
    turn. A server tool's result block follows its ``server_tool_use`` in the same turn, except
    in the final assistant turn, which may be a paused one sent back to continue. Ids match
    ``^[a-zA-Z0-9_-]+$`` and are unique; a tool named in history is defined in ``tools``;
    thinking blocks carry the signature issued for their text, and redacted thinking the data
    issued, unchanged. A turn this fake ended with ``pause_turn`` needs no tool results: it is
    sent back as it was for the model to go on.
    """
    if not tools.defined and any(
        b.type in ("tool_use", "tool_result") for t in turns for b in t.blocks
    ):
        raise Invalid(
            (), "Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    ids: set[str] = set()
    if turns[0].role == "user":
        _check_results(turns[0], {})
    for index, turn in enumerate(turns):
        if turn.role != "assistant":
            continue
        pending: dict[str, _Block] = {}
        servers: dict[str, _Block] = {}
        resolved: set[str] = set()
        for block in turn.blocks:
            value = block.value
            if block.type == "thinking" and not thinking_is_signed(value, secret):
                raise Invalid(block.path, "Invalid `signature` in `thinking` block")
            if block.type == "redacted_thinking" and not redacted_is_intact(value["data"], secret):
                raise Invalid(block.path, "Invalid `data` in `redacted_thinking` block")
            if block.type in ("tool_use", "server_tool_use"):
                server = block.type == "server_tool_use"
                pattern = SERVER_TOOL_USE_ID if server else TOOL_USE_ID
                if not re.fullmatch(pattern, value["id"]):
                    raise Invalid(block.field("id"), f"String should match pattern '{pattern}'")
                if value["id"] in ids:
                    raise Invalid(block.path, f"`tool_use` ids must be unique: {value['id']}")
                ids.add(value["id"])
                known = tools.server if server else tools.client
                if value["name"] not in known and not (
                    value.get("toolset_name") and tools.toolsets
                ):
                    raise Invalid(
                        block.field("name"),
                        f"tool '{value['name']}' is used in the conversation but is not "
                        "defined in `tools`",
                    )
                (servers if server else pending)[value["id"]] = block
            if block.type in SERVER_RESULT_TYPES:
                if value["tool_use_id"] not in servers:
                    raise Invalid(
                        block.path,
                        f"unexpected `tool_use_id` found in `{block.type}` block: "
                        f"{value['tool_use_id']}. A server tool's result must follow its "
                        "`server_tool_use` block in the same assistant turn.",
                    )
                resolved.add(value["tool_use_id"])
        final = index == len(turns) - 1
        unresolved = [i for i in servers if i not in resolved]
        if unresolved and not final:
            raise Invalid(
                servers[unresolved[0]].path[:2],
                f"`server_tool_use` ids were found without result blocks: "
                f"{', '.join(unresolved)}. Only a final (paused) assistant turn may leave a "
                "server tool unanswered.",
            )
        following = None if final else turns[index + 1]
        _check_results(following, pending, complete=not _paused(turn, issued))


def _check_results(
    turn: _Turn | None, pending: dict[str, _Block], *, complete: bool = True
) -> None:
    answered: set[str] = set()
    other: _Block | None = None
    for block in turn.blocks if turn is not None else []:
        if block.type != "tool_result":
            other = other or block
            continue
        tool_use_id = block.value["tool_use_id"]
        if not re.fullmatch(TOOL_USE_ID, tool_use_id):
            raise Invalid(
                block.field("tool_use_id"), f"String should match pattern '{TOOL_USE_ID}'"
            )
        if tool_use_id not in pending:
            raise Invalid(
                block.path,
                f"unexpected `tool_use_id` found in `tool_result` blocks: {tool_use_id}. Each "
                "`tool_result` block must have a corresponding `tool_use` block in the previous "
                "message.",
            )
        if tool_use_id in answered:
            raise Invalid(
                block.path,
                "each `tool_use` must have a single result. Found multiple `tool_result` "
                f"blocks with id: {tool_use_id}",
            )
        if other is not None:
            raise Invalid(
                block.path,
                "`tool_result` blocks must come first in the user message that answers "
                f"`tool_use` blocks, before any other content (found `{other.type}` at "
                f"{'.'.join(map(str, other.path))})",
            )
        answered.add(tool_use_id)
    missing = [i for i in pending if i not in answered]
    if missing and complete:
        raise Invalid(
            pending[missing[0]].path[:2],
            "`tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
        )


def _check_thinking_kept(
    turns: list[_Turn], thinking: str | None, issued: Sequence[Issued]
) -> None:
    """With thinking on, the assistant turns of the tool-use loop in progress (those since the
    last user turn that was not tool results) go back with their thinking blocks first and
    unmodified, in their original order (the ``ThinkingBlockParam`` docstring; the API's
    "a final `assistant` message must start with a thinking block"). An answer the fake issued
    is recognised by its other blocks; with ``enabled`` thinking the loop's first assistant
    turn must start with thinking even if this fake did not issue it."""
    if thinking not in _THINKING_ON or turns[-1].role != "user" or not turns[-1].has_results():
        return
    loop: list[_Turn] = []
    at = len(turns) - 1
    while at >= 1 and turns[at].role == "user" and turns[at].has_results():
        loop.insert(0, turns[at - 1])
        at -= 2
    for turn in loop:
        for message in turn.messages:
            sent = _as_sent([b.value for b in message.blocks])
            rest = [b for b in sent if b["type"] not in THINKING_TYPES]
            for answer in reversed(issued):
                if [b for b in answer.content if b["type"] not in THINKING_TYPES] != rest:
                    continue
                kept = any(b["type"] in THINKING_TYPES for b in answer.content)
                if kept and answer.content != sent:
                    first = message.blocks[0]
                    if first.type not in THINKING_TYPES:
                        raise Invalid(
                            (*first.path, "type"), _EXPECTED_THINKING.format(found=first.type)
                        )
                    raise Invalid(
                        ("messages", message.index, "content"),
                        "`thinking` blocks must be passed back unmodified and in their original "
                        "order, before the rest of the answer they came with",
                    )
                break
    first = loop[0].messages[0].blocks[0]
    if thinking == "enabled" and first.type not in THINKING_TYPES:
        raise Invalid((*first.path, "type"), _EXPECTED_THINKING.format(found=first.type))


# -- the answer -------------------------------------------------------------------------------


def check_answer(answer: dict[str, Any], request: Checked, secret: bytes) -> None:
    """Raise ``ScriptError`` if the real model could not give ``answer`` (a whole Messages
    response body) to ``request``."""
    body = request.body
    content: list[dict[str, Any]] = answer["content"]
    uses = [b for b in content if b["type"] == "tool_use"]
    thinking = body.get("thinking")
    for index, block in enumerate(content):
        where = f"answer block {index} ({block['type']})"
        member = bool(block.get("toolset_name")) and request.tools.toolsets
        if block["type"] == "tool_use" and block["name"] not in request.tools.client and not member:
            raise ScriptError(f"{where}: the request defines no client tool {block['name']!r}")
        if block["type"] == "server_tool_use" and block["name"] not in request.tools.server:
            raise ScriptError(f"{where}: the request defines no server tool {block['name']!r}")
        if block["type"] == "thinking" and not thinking_is_signed(block, secret):
            raise ScriptError(
                f"{where}: not signed with this fake's secret; build it with thinking()"
            )
        if block["type"] == "redacted_thinking" and not redacted_is_intact(block["data"], secret):
            raise ScriptError(
                f"{where}: data not issued under this fake's secret; use redacted_thinking()"
            )
        if block["type"] in THINKING_TYPES and thinking and thinking["type"] == "disabled":
            raise ScriptError(f"{where}: the request disabled thinking")
    last = body["messages"][-1]
    fresh = last["role"] == "user" and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
    )
    # With manual extended thinking the model thinks before it answers a new user turn
    # (answers to tool results go on without, unless thinking is interleaved).
    unthought = not content or content[0]["type"] not in THINKING_TYPES
    if thinking and thinking["type"] == "enabled" and fresh and unthought:
        raise ScriptError("with thinking enabled, an answer to a user turn starts with thinking")
    choice = body.get("tool_choice") or {"type": "auto"}
    if choice["type"] == "none" and uses:
        raise ScriptError("the request's tool_choice is none, yet the answer uses a tool")
    forced = choice["type"] in ("any", "tool") and answer["stop_reason"] != "max_tokens"
    if forced and (not uses or (choice["type"] == "tool" and uses[0]["name"] != choice["name"])):
        raise ScriptError(f"the request's tool_choice {choice} forces a tool use the answer lacks")
    stopped = answer.get("stop_sequence")
    if answer["stop_reason"] == "stop_sequence" and stopped not in body.get("stop_sequences", []):
        raise ScriptError(
            f"stop_sequence {answer.get('stop_sequence')!r} is not one the request set"
        )
    output = answer["usage"]["output_tokens"]
    if output > body["max_tokens"]:
        raise ScriptError(f"output_tokens {output} exceeds max_tokens {body['max_tokens']}")
