"""The model seam: reply checking, ``ModelReply``, the public names, a cheap import, the end
of a streamed answer and the errors of the connection under it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import httpcore2
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether.models
from tether._errors import ModelError, ModelResponseError
from tether.journal import Usage
from tether.models import (
    AnthropicModel,
    Model,
    ModelReply,
    OpenAIModel,
    ScriptedModel,
    check_reply_blocks,
)
from tether.models._base import StreamEnd
from tether.models._client import stream_errors

from .._plain import plain


def test_public_names() -> None:
    assert sorted(tether.models.__all__) == sorted(
        [
            "AgentStepBlock",
            "AnthropicModel",
            "BLOCK_TYPES",
            "Base64Source",
            "Blocks",
            "CacheControl",
            "ContentBlock",
            "Conversation",
            "DocumentBlock",
            "FileSource",
            "ImageBlock",
            "KNOWN_TYPES",
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
    plain(message["content"])[0]["text"] = "changed"
    assert plain(reply.content)[0]["text"] == "hi"
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


# -- the end of a streamed answer, and a failed connection --------------------------------------

SIGNALS = ("a finish reason", "[DONE]")


@given(st.lists(st.sampled_from(SIGNALS)))
def test_a_stream_is_an_answer_only_once_every_signal_arrived(seen: list[str]) -> None:
    end = StreamEnd("gpt-5-mini", *SIGNALS)
    for signal in seen:
        end.saw(signal)
    missing = [s for s in SIGNALS if s not in seen]
    assert end.missing == missing
    if not missing:
        end.check()
        return
    with pytest.raises(ModelError) as info:
        end.check()
    assert info.value.transient
    assert info.value.usage is None
    assert info.value.reason.startswith(f"the stream ended before {' and '.join(missing)}:")


def test_a_signal_the_end_was_not_made_with_is_refused() -> None:
    end = StreamEnd("claude-haiku-4-5", "message_stop")
    with pytest.raises(ValueError, match="'message-stop' is none of"):
        end.saw("message-stop")
    with pytest.raises(ValueError, match="at least one signal"):
        StreamEnd("claude-haiku-4-5")


def test_the_transports_errors_are_transient_and_say_what_lies_under_them() -> None:
    def raised(exc: BaseException) -> ModelError:
        with pytest.raises(ModelError) as info, stream_errors("m"):
            raise exc
        return info.value

    inner = ConnectionResetError(104, "Connection reset by peer")
    wrapped = httpcore2.ReadError("")
    wrapped.__cause__ = inner
    outer = httpx2.ReadError("")
    outer.__cause__ = wrapped
    dropped = raised(outer)
    assert dropped.transient
    assert dropped.reason == (
        "connection failed: ReadError: ConnectionResetError: [Errno 104] Connection reset by peer"
    )
    assert raised(httpx2.RemoteProtocolError("peer closed connection")).reason == (
        "connection failed: RemoteProtocolError: peer closed connection"
    )
    assert raised(anyio.EndOfStream()).reason == "connection failed: EndOfStream"
    stalled = raised(httpx2.ReadTimeout("timed out"))
    assert stalled.transient
    assert stalled.reason == "request timed out: ReadTimeout: timed out"
    cut = raised(_undecodable())
    assert cut.transient
    assert cut.reason.startswith("the stream ended inside a character: ")
    garbled = raised(json.JSONDecodeError("Expecting value", "{", 1))
    assert isinstance(garbled, ModelResponseError)
    assert not garbled.transient
    with pytest.raises(KeyError), stream_errors("m"):
        raise KeyError("not the network's")


def _undecodable() -> UnicodeDecodeError:
    try:
        b"\xe2\x80".decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError("decoded")
