"""The model seam: reply checking, ``ModelReply``, the public names, and a cheap import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

import tether.models
from tether._errors import ModelResponseError
from tether.journal import Usage
from tether.models import (
    AnthropicModel,
    Model,
    ModelReply,
    OpenAIModel,
    ScriptedModel,
    check_reply_blocks,
)


def test_public_names() -> None:
    assert sorted(tether.models.__all__) == sorted(
        [
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
    )
    for name in tether.models.__all__:
        assert hasattr(tether.models, name), name


def test_importing_models_does_not_import_the_sdk() -> None:
    # Agent child processes import tether.models; the SDK (and its HTTP stack) must wait until
    # a model is really called.
    script = textwrap.dedent(
        """
        import sys
        import tether.models
        tether.models.AnthropicModel("claude-haiku-4-5", stop_sequences=["END"])
        tether.models.OpenAIModel("gpt-5-mini", api="responses", temperature=0)
        tether.models.ScriptedModel(["hello"])
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("anthropic", "openai")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_both_adapters_satisfy_the_protocol() -> None:
    # Checked by mypy: both must be assignable to Model.
    models: list[Model] = [
        ScriptedModel(["hi"]),
        AnthropicModel("claude-haiku-4-5"),
        OpenAIModel("gpt-5-mini"),
    ]
    assert [m.name for m in models] == ["scripted", "claude-haiku-4-5", "gpt-5-mini"]


def test_reply_as_message_is_a_copy() -> None:
    reply = ModelReply(content=[{"type": "text", "text": "hi"}], usage=Usage(input_tokens=1))
    message = reply.as_message()
    assert message == {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    message["content"][0]["text"] = "changed"
    assert reply.content[0]["text"] == "hi"
    assert reply.stop_reason is None


def test_valid_blocks_are_returned_as_given() -> None:
    blocks: list[Any] = [
        {"type": "thinking", "thinking": "let me see", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "", "citations": []},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
        {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {}},
    ]
    assert check_reply_blocks("m", blocks) is blocks
    assert check_reply_blocks("m", []) == []


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ({"type": "text", "text": "hi"}, "content must be a list of blocks, got dict"),
        ([{"type": "text", "text": "a"}, "b"], "block 1: must be an object, got str"),
        ([{"text": "hi"}], "block 0: has no string 'type'"),
        ([{"type": "text", "text": 3}], "block 0 (text): 'text' must be a string (got int)"),
        ([{"type": "text"}], "block 0 (text): 'text' must be a string (missing)"),
        (
            [{"type": "text", "text": "ok"}, {"type": "tool_use", "name": "x", "input": {}}],
            "block 1 (tool_use): 'id' must be a string (missing)",
        ),
        (
            [{"type": "tool_use", "id": "t", "name": "", "input": {}}],
            "block 0 (tool_use): 'name' is empty",
        ),
        (
            [{"type": "tool_use", "id": "t", "name": "x", "input": [1]}],
            "block 0 (tool_use): 'input' must be an object (got list)",
        ),
        (
            [
                {"type": "tool_use", "id": "t", "name": "x", "input": {}},
                {"type": "text", "text": "and"},
                {"type": "tool_use", "id": "t", "name": "y", "input": {}},
            ],
            "block 2 (tool_use): id 't' is already used by block 0",
        ),
        (
            [{"type": "thinking", "thinking": "hm"}],
            "block 0 (thinking): 'signature' must be a string (missing)",
        ),
        (
            [{"type": "tool_use", "id": "t", "name": "x", "input": {}, "input_error": 1}],
            "block 0 (tool_use): 'input_error' must be a string",
        ),
    ],
)
def test_malformed_blocks_name_the_index_and_problem(blocks: object, expected: str) -> None:
    with pytest.raises(ModelResponseError) as info:
        check_reply_blocks("claude-x", blocks)
    assert info.value.model == "claude-x"
    assert expected in info.value.reason


def test_blocks_of_other_types_are_kept_as_they_came() -> None:
    """Server tool calls, their results and types a newer API adds are journaled opaque."""
    blocks: list[dict[str, Any]] = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "some_future_block", "payload": {"nested": [1, 2]}},
        {"type": "text", "text": "found it"},
    ]
    assert check_reply_blocks("m", blocks) is blocks
