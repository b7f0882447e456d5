"""A model that keeps its messages (``frozen_messages``) is handed the run's own, read-only, the
same objects at every call; any other model gets plain dicts, as before."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import tether
from tether.journal import ModelResponse, Usage
from tether.models import ContentBlock, Message, ModelReply, SystemPrompt, ToolDefinition
from tether.models._transcript import FrozenDict
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, read_events

use = tether.ScriptedModel.tool_use


def step_tools() -> tether.ToolRegistry:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def step(n: int) -> dict[str, Any]:
        """One step."""
        return {"n": n}

    return tools


class Keeper:
    """A model that keeps every list of messages it is given; ``frozen_messages`` as set."""

    name = "keeper"
    params: dict[str, Any] = {}  # noqa: RUF012 - fixed, empty

    def __init__(self, frozen: object) -> None:
        self.frozen_messages = frozen
        self.requests: list[list[Message]] = []

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        self.requests.append(messages)
        turn = len(self.requests)
        if turn < 4:
            return ModelReply(
                content=[use(f"t{turn}", "step", {"n": turn})], stop_reason="tool_use"
            )
        return ModelReply(content=[{"type": "text", "text": "done"}])


async def test_a_model_that_keeps_its_messages_gets_the_runs_own_read_only(
    tmp_path: pathlib.Path,
) -> None:
    model = Keeper(frozen=True)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools()) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")
    first, *later = model.requests
    for earlier, request in zip(model.requests, later, strict=False):
        assert all(type(m) is FrozenDict for m in request)
        # One copy of each message, shared by every call: no message was copied again.
        assert all(a is b for a, b in zip(earlier, request, strict=False))
        assert len(request) == len(earlier) + 2
    with pytest.raises(TypeError):
        first[0]["content"] = "changed"
    with pytest.raises(TypeError):
        later[-1][1]["content"].append({"type": "text", "text": "more"})  # type: ignore[union-attr]
    # What the journal says, and what inspect folds from it, are plain messages.
    assert all(type(m) is dict for m in view.messages)
    assert view.messages == model.requests[-1] + [
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    ]
    events = await read_events(tmp_path, "run-1")
    assert sum(isinstance(e, ModelResponse) for e in events) == 4


@pytest.mark.parametrize("frozen", [False, "yes", None])
async def test_any_other_model_gets_plain_messages(tmp_path: pathlib.Path, frozen: object) -> None:
    model = Keeper(frozen=frozen)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools()) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
    assert all(type(m) is dict for request in model.requests for m in request)


async def test_a_script_function_sees_the_runs_read_only_messages(tmp_path: pathlib.Path) -> None:
    refused: list[bool] = []

    def script(messages: list[Message]) -> str | list[ContentBlock]:
        try:
            messages[-1]["role"] = "assistant"
        except TypeError:
            refused.append(True)
        step = sum(1 for m in messages if m["role"] == "assistant")
        return [use(f"t{step}", "step", {"n": step})] if step < 2 else "done"

    model = tether.ScriptedModel(script)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools()) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")
    assert refused == [True, True, True]
    assert [m["role"] for m in view.messages] == ["user", "assistant"] * 3


class Recording:
    """A ``ScriptedModel`` that remembers the messages of every call it is given, and how many
    read-only copies it keeps after each; its ``frozen_messages`` is the inner model's."""

    def __init__(self, inner: tether.ScriptedModel) -> None:
        self.inner = inner
        self.name, self.params = inner.name, inner.params
        self.frozen_messages = inner.frozen_messages
        self.requests: list[list[Message]] = []
        self.copies: list[int] = []

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> ModelReply:
        self.requests.append(messages)
        reply = await self.inner(system=system, messages=messages, tools=tools)
        kept = self.inner._transcripts._kept.values()
        self.copies.append(sum(len(t.frozen) for t in kept))
        return reply


async def test_a_list_script_is_handed_plain_messages_and_keeps_no_copy(
    tmp_path: pathlib.Path,
) -> None:
    """A list script hands the conversation to no code of the caller's: the run's messages
    are not frozen for it, and it keeps no read-only copy of its own (only counts and sizes)."""
    script: list[str | list[ContentBlock]] = [
        [use("t1", "step", {"n": 1})],
        [use("t2", "step", {"n": 2})],
        "done",
    ]
    model = Recording(tether.ScriptedModel(script))
    assert model.frozen_messages is False
    assert tether.ScriptedModel(lambda messages: "done").frozen_messages is True
    usage = tether.ScriptedModel(script, usage=lambda messages, blocks: Usage())
    assert usage.frozen_messages is True
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=step_tools()) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")
    assert all(type(m) is dict for request in model.requests for m in request)
    assert [len(r) for r in model.requests] == [1, 3, 5]
    assert [m["role"] for m in view.messages] == ["user", "assistant"] * 3
    assert model.copies == [0, 0, 0]

    def one_call(messages: list[Message]) -> str | list[ContentBlock]:
        return [use("t1", "step", {"n": 1})] if len(messages) < 2 else "done"

    function = Recording(tether.ScriptedModel(one_call))
    async with Supervisor(tether.FileStore(tmp_path), model=function, tools=step_tools()) as sup:
        await sup.start("run-2", "go")
        assert await sup.wait("run-2", timeout=WAIT) is RunStatus.DONE
    assert function.copies == [1, 0]  # (the conversation is let go once its turn ends)
    assert all(type(m) is FrozenDict for m in function.requests[-1])
