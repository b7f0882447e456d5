"""The message types bite: a mistyped block is a type error, and a block tether does not know
still passes through (typed as ``OpaqueBlock``), in the code and at run time."""

from __future__ import annotations

import typing

import msgspec
import pytest
from mypy import api

import tether
from tether.models import (
    KNOWN_TYPES,
    ContentBlock,
    Conversation,
    KnownBlock,
    Message,
    ModelReply,
    OpaqueBlock,
    ScriptedModel,
    blocks_from,
    blocks_of,
    check_reply_blocks,
    is_known,
    messages_of,
    text_of,
    tool_uses,
)
from tether.operate import RunSummary

# A model of a user's: what it builds and what it reads are checked against the protocol.
SNIPPET = """
from tether import Message, Model, ModelReply, ToolDefinition
from tether.models import SystemPrompt, is_known


class Echo:
    name = "echo"
    params: dict[str, object] = {{}}

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        last = messages[-1]["content"]
        for block in last if isinstance(last, list) else []:
            if is_known(block) and block["type"] == {compared!r}:
                pass
        return ModelReply(
            content=[{{"type": {built!r}, "id": "toolu_1", "name": "look", "input": {{}}}}]
        )


model: Model = Echo()
"""


CASES = {
    "right": ("tool_use", "tool_result"),
    "built_wrong": ("tool_usee", "tool_result"),
    "compared_wrong": ("tool_use", "tool_resullt"),
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy's complaints about each case, from one run over them all."""
    root = tmp_path_factory.mktemp("snippets")
    for name, (built, compared) in CASES.items():
        (root / f"{name}.py").write_text(SNIPPET.format(built=built, compared=compared))
    out, err, _ = api.run(
        ["--config-file=", "--strict", f"--cache-dir={root / '.cache'}", str(root)]
    )
    assert not err, err
    return {
        name: "\n".join(line for line in out.splitlines() if line.startswith(str(root / name)))
        for name in CASES
    }


@pytest.mark.slow
def test_a_model_that_builds_and_reads_known_blocks_type_checks(checked: dict[str, str]) -> None:
    assert checked["right"] == ""


@pytest.mark.slow
def test_a_mistyped_block_type_is_a_type_error(checked: dict[str, str]) -> None:
    assert "incompatible type" in checked["built_wrong"]
    assert "tool_usee" in checked["built_wrong"] or "ToolUseBlock" in checked["built_wrong"]
    assert "Non-overlapping equality check" in checked["compared_wrong"]
    assert "tool_resullt" in checked["compared_wrong"]


def test_known_types_are_the_types_of_the_known_blocks() -> None:
    literals = {
        typing.get_args(typing.get_type_hints(block)["type"])[0]
        for block in typing.get_args(KnownBlock)
    }
    assert literals == KNOWN_TYPES


def test_a_block_tether_does_not_know_passes_through() -> None:
    server_call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    future = {"type": "block_of_2030", "anything": [1, 2]}
    blocks = check_reply_blocks("m", [{"type": "text", "text": "hi"}, server_call, future])
    assert blocks[1] is server_call
    assert blocks[2] is future
    assert [is_known(b) for b in blocks] == [True, False, False]
    assert text_of(blocks) == ["hi"]
    assert tool_uses(blocks) == []
    opaque: ContentBlock = OpaqueBlock(dict(future))
    assert opaque == future


def test_journaled_messages_are_typed_as_they_are() -> None:
    raw = [
        {"role": "assistant", "content": [{"type": "mystery"}, ScriptedModel.tool_use("t", "n")]}
    ]
    messages = messages_of(raw)
    assert messages is raw  # not copied, not checked
    message: Message = messages[0]
    assert [b["id"] for b in tool_uses(blocks_of(message))] == ["t"]
    assert blocks_of({"role": "user", "content": "text"}) == []


def test_conversations_and_blocks_are_plain_lists_to_msgspec() -> None:
    """A run's state is converted by msgspec inside a kept summary, and a ModelReply may be
    decoded: what they hold is taken as it is, blocks tether does not know included."""
    messages = [{"role": "assistant", "content": [{"type": "block_of_2030", "x": 1}]}]
    assert msgspec.convert(messages, Conversation) == messages
    summary = msgspec.convert({"run_id": "r", "status": "done"}, RunSummary)
    assert summary.state is None
    unknown = blocks_from([{"type": "block_of_2030", "x": 1}])
    sent = msgspec.json.encode(ModelReply(content=unknown))
    assert msgspec.json.decode(sent, type=ModelReply).content == unknown


def test_the_types_are_public_where_a_model_is_written() -> None:
    assert tether.Message is Message
    assert tether.ContentBlock is ContentBlock
