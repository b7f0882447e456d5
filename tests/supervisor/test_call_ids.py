"""Call ids come from the model: each is made safe and run-unique before it is journaled.

A call id reaches a form's URL in the console, a child run's id and an idempotency key, so an
id outside the safe alphabet (a path, a colon, NUL, 10 KB of text) is renamed at the boundary,
as an id the run used before already is; replay and the model's later requests then see only
the new id.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.journal import ModelResponse, ToolResult
from tether.journal._runid import check_run_id
from tether.models import Message, blocks_of, tool_uses
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._attempt import child_run_id
from tether.supervisor._reply import SAFE_CALL_ID, safe_call_ids
from tether.supervisor._state import RunState, fold

from .._plain import plain
from ._helpers import WAIT, of_type, read_events

use = tether.ScriptedModel.tool_use
SAFE_CHARS = re.compile(r"[A-Za-z0-9_-]+")


def message(*ids: str) -> Message:
    return {"role": "assistant", "content": [use(i, "lookup", {}) for i in ids]}


def renamed(ids: list[str], used: set[str] | None = None) -> list[str]:
    msg = message(*ids)
    state = RunState(call_ids=set(used or ()), model_calls=2)
    safe_call_ids(msg, state, "run-1")
    return [b["id"] for b in tool_uses(blocks_of(msg))]


@pytest.mark.parametrize(
    "given_id",
    [
        "x/../../../VICTIM/calls/toolu_b",
        "functions.ask:0",
        "a\x00b",
        "..",
        ".",
        "caf\u00e9",
        "id with spaces",
        "%2e%2e",
        "k" * 10_000,
        "\ud800",
    ],
)
def test_an_unsafe_id_is_renamed_into_the_safe_alphabet(given_id: str) -> None:
    (new_id,) = renamed([given_id])
    assert SAFE_CALL_ID.fullmatch(new_id)
    assert new_id != given_id
    assert renamed([given_id]) == [new_id]  # the same answer gets the same id


def test_safe_ids_are_kept_and_used_ones_get_the_turns_number() -> None:
    assert renamed(["toolu_01A", "call_abc-1"]) == ["toolu_01A", "call_abc-1"]
    assert renamed(["call_0"], used={"call_0"}) == ["call_0-t3"]


def test_the_same_safe_characters_twice_still_make_two_ids() -> None:
    first, second = renamed(["a/b", "a:b"])
    assert first != second
    assert first.startswith("a_b-")
    assert second.startswith("a_b-")


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=6, unique=True))
def test_every_id_comes_out_safe_and_unique(ids: list[str]) -> None:
    used = {ids[0]} if len(ids) > 1 else set()
    out = renamed(ids, used)
    assert len(set(out)) == len(out)
    assert not set(out) & used
    for given_id, new_id in zip(ids, out, strict=True):
        assert SAFE_CALL_ID.fullmatch(new_id) or "-t3" in new_id
        assert SAFE_CHARS.fullmatch(new_id)
        if SAFE_CALL_ID.fullmatch(given_id) and given_id not in used:
            assert new_id == given_id


@given(st.text(min_size=1, max_size=200))
def test_a_child_run_id_is_always_a_valid_run_id(call_id: str) -> None:
    child = child_run_id("run-lead", call_id)
    assert check_run_id(child) == child
    assert child_run_id("run-lead", call_id) == child


async def test_a_run_whose_model_gives_hostile_ids_journals_and_answers_safe_ones(
    tmp_path: pathlib.Path,
) -> None:
    seen: list[str] = []
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key")
    async def lookup(ctx: tether.ToolContext) -> str:
        """Look something up."""
        seen.append(ctx.idempotency_key)
        return "found"

    hostile = ["x/../../../run-other/calls/toolu_b", "functions.ask:0"]

    def answer(messages: list[Message]) -> Any:
        return [message(*hostile)["content"], "done"][len(messages) // 2]

    async with Supervisor(
        tether.FileStore(tmp_path), model=tether.ScriptedModel(answer), tools=tools
    ) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
        view = await sup.inspect("run-1")
    events = await read_events(tmp_path, "run-1")
    (response, _) = of_type(events, ModelResponse)
    ids = [b["id"] for b in response.message["content"]]
    assert all(SAFE_CALL_ID.fullmatch(i) for i in ids)
    assert sorted(seen) == sorted(f"run-1:{i}" for i in ids)
    assert sorted(r.call_id for r in of_type(events, ToolResult)) == sorted(ids)
    # What the model reads back refers to the journaled ids only.
    results = plain(view.messages[2]["content"])
    assert [r["tool_use_id"] for r in results] == ids
    assert fold(events).call_ids == set(ids)
