"""Records are left out of the cyclic garbage collector (``gc=False``), and that is safe.

A run holds every event of its journal, so each tracked record is one more object every
collection of the process walks (and one more allocation towards the next one). msgspec's rule
for ``gc=False``: an instance must never be part of a reference cycle, which the collector
could then not free. Records are frozen, and what their fields hold is plain data made for
them (decoded from a file, a tool's result round-tripped through JSON, a model's reply turned
into a message): nothing reachable from a record's fields refers back to it. These tests hold
the runtime to that: in records it writes, in records read back, and in what a finished run
leaves behind once a supervisor is done.
"""

from __future__ import annotations

import gc
import pathlib
from typing import Any

import msgspec
import pytest

import tether
from tether.journal import (
    BlobRef,
    Budgets,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolPin,
    Usage,
)
from tether.journal._records import EVENT_TYPES
from tether.models import ContentBlock, Message

RECORD_TYPES: tuple[type[msgspec.Struct], ...] = (
    *EVENT_TYPES,
    Usage,
    ToolPin,
    Manifest,
    Budgets,
    BlobRef,
)


@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.__name__)
def test_every_record_type_is_frozen_and_left_out_of_the_collector(
    record_type: type[msgspec.Struct],
) -> None:
    config = record_type.__struct_config__
    assert config.frozen  # no field can be pointed back at the record
    assert not config.gc


def _reaches(root: object, value: object, seen: set[int]) -> bool:
    """Whether ``value`` (a field of ``root``, or inside one) refers to ``root``."""
    if value is root:
        return True
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, msgspec.Struct):
        children: Any = (getattr(value, f) for f in value.__struct_fields__)
    elif isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple | set | frozenset):
        children = value
    else:
        return False
    return any(_reaches(root, child, seen) for child in children)


def _in_a_cycle(record: msgspec.Struct) -> bool:
    seen: set[int] = set()
    return any(_reaches(record, getattr(record, f), seen) for f in record.__struct_fields__)


MARK = "a marker only this test's conversation holds"


def _agent() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(key: str) -> dict[str, Any]:
        """Look a key up."""
        return {"key": key, "found": [MARK, {"nested": MARK}]}

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn < 3:
            return [tether.ScriptedModel.tool_use(f"t{turn}", "lookup", {"key": MARK})]
        return MARK

    return tether.ScriptedModel(script, name="untracked"), tools


async def test_records_of_a_run_are_untracked_and_in_no_cycle(tmp_path: pathlib.Path) -> None:
    model, tools = _agent()
    store = FileStore(tmp_path)
    async with tether.Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
        await sup.start("r", f"go {MARK}")
        assert await sup.wait("r") is tether.RunStatus.DONE
    async with FileStore(tmp_path) as again:
        read_back = await again.read("r")
    assert len(read_back) >= 8
    for event in read_back:
        assert not gc.is_tracked(event), event
        assert not _in_a_cycle(event), event
    response = next(e for e in read_back if isinstance(e, ModelResponse))
    # The containers inside a record are still the collector's to see.
    assert gc.is_tracked(response.message)


async def test_a_finished_run_leaves_nothing_for_the_collector(tmp_path: pathlib.Path) -> None:
    """Nothing of a run outlives the supervisor that drove it, even when the collector is off:
    its records, held only by lists and the state, go by reference counting alone (a cycle
    through an untracked record would keep its conversation alive for good)."""
    model, tools = _agent()
    gc.collect()
    gc.disable()
    try:
        async with (
            FileStore(tmp_path) as store,
            tether.Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup,
        ):
            await sup.start("r", f"go {MARK}")
            assert await sup.wait("r") is tether.RunStatus.DONE
        del sup, store, model, tools
        gc.collect()
        left = [
            o
            for o in gc.get_objects()
            if isinstance(o, dict) and MARK in (o.get("key"), o.get("text"), o.get("nested"))
        ]
        assert left == []
    finally:
        gc.enable()


def test_a_record_decoded_from_bytes_is_untracked() -> None:
    started = RunStarted(
        run_id="r", manifest=Manifest(model="m"), messages=[{"role": "user", "content": "hi"}]
    )
    data = msgspec.msgpack.encode(started)
    decoded = msgspec.msgpack.decode(data, type=RunStarted)
    assert decoded == started
    assert not gc.is_tracked(decoded)
    assert not gc.is_tracked(decoded.manifest)
    assert not _in_a_cycle(decoded)
