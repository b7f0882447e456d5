"""The manifest a run pins (model, parameters, system prompt, tool contracts) on resume."""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

import tether
from tether.journal import AnyEvent, ModelResponse, Parked, Retried, RunStarted, ToolStarted
from tether.supervisor import RunStatus, Supervisor

from ._helpers import (
    WAIT,
    RecordingModel,
    craft,
    craft_dangling,
    manifest_for,
    of_type,
    read_events,
    results_by_id,
)

use = tether.ScriptedModel.tool_use
RUN = "run-1"
FETCH_CALL = use("toolu_01", "fetch", {"url": "u"})
SCRIPT: list[Any] = [[FETCH_CALL], "done"]


async def fetch_str(url: str) -> str:
    """Fetch a page."""
    return f"page {url}"


async def fetch_int(url: int) -> str:
    """Fetch a page."""
    return f"page {url}"


async def fetch_v2(url: str, timeout: float = 1.0) -> str:
    """Fetch a page."""
    return f"page {url} (v2)"


def registry(*specs: tuple[Callable[..., Awaitable[str]], str]) -> tether.ToolRegistry:
    tools = tether.ToolRegistry()
    for fn, version in specs:
        tools.register(fn, name="fetch", version=version, policy="rerun")
    return tools


def original() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    return tether.ScriptedModel(SCRIPT), registry((fetch_str, "1"))


CHANGES: dict[
    str, tuple[Callable[[], tether.ScriptedModel], Callable[[], tether.ToolRegistry], list[str]]
] = {
    "model name": (
        lambda: tether.ScriptedModel(SCRIPT, name="scripted-2"),
        lambda: registry((fetch_str, "1")),
        ["pinned model 'scripted'", "scripted-2"],
    ),
    "model parameters": (
        lambda: tether.ScriptedModel([*SCRIPT, "one more answer"]),
        lambda: registry((fetch_str, "1")),
        ["model parameters changed", "script_hash"],
    ),
    "tool schema": (
        lambda: tether.ScriptedModel(SCRIPT),
        lambda: registry((fetch_int, "1")),
        ["'fetch'", "version '1'", "changed its contract"],
    ),
    "missing tool": (
        lambda: tether.ScriptedModel(SCRIPT),
        tether.ToolRegistry,
        ["pinned tool 'fetch'", "version '1'", "not registered"],
    ),
    "only a newer version": (
        lambda: tether.ScriptedModel(SCRIPT),
        lambda: registry((fetch_v2, "2")),
        ["pinned tool 'fetch'", "version '1'", "not registered"],
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_resume_with_a_changed_contract_stops_for_a_person(
    tmp_path: pathlib.Path, change: str
) -> None:
    model, tools = original()
    await craft_dangling(tmp_path, RUN, model=model, tools=tools, block=FETCH_CALL)
    before = await read_events(tmp_path, RUN)

    make_model, make_tools, words = CHANGES[change]
    new_model = make_model()
    async with Supervisor(tether.FileStore(tmp_path), model=new_model, tools=make_tools()) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)

    for word in words:
        assert word in view.reason
    assert new_model.calls == 0
    # Nothing else appended (not even `resumed`): only why it is parked, for every view.
    assert_parked_for(await read_events(tmp_path, RUN), before, view.reason)

    # A second look by the same application adds nothing.
    async with Supervisor(tether.FileStore(tmp_path), model=make_model(), tools=make_tools()):
        pass
    assert_parked_for(await read_events(tmp_path, RUN), before, view.reason)

    # Back on the pinned contract (a rolled-back deploy), the same run goes on by itself.
    model, tools = original()
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
        assert (await sup.inspect(RUN)).final_text == "done"
    assert model.calls == 1
    (retried,) = of_type(await read_events(tmp_path, RUN), Retried)
    assert retried.by == ""
    assert "which has the run's pinned contracts" in retried.note


def assert_parked_for(events: list[AnyEvent], before: list[AnyEvent], reason: str) -> None:
    assert events[: len(before)] == before
    (parked,) = events[len(before) :]
    assert isinstance(parked, Parked)
    assert (parked.cause, parked.reason) == ("contract", reason)


async def test_a_system_prompt_that_does_not_match_its_hash_stops_the_run(
    tmp_path: pathlib.Path,
) -> None:
    model, tools = original()
    manifest = manifest_for(model, tools, system="You are careful.")
    tampered = msgspec.structs.replace(manifest, system="You are reckless.")
    await craft(
        tmp_path,
        RUN,
        [RunStarted(run_id=RUN, manifest=tampered, messages=[{"role": "user", "content": "go"}])],
    )
    before = await read_events(tmp_path, RUN)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert "system prompt" in view.reason
    assert model.calls == 0
    assert_parked_for(await read_events(tmp_path, RUN), before, view.reason)


async def test_a_run_interrupted_mid_work_is_checked_before_it_continues(
    tmp_path: pathlib.Path,
) -> None:
    """Not only dangling calls: a run between turns is checked the same way."""
    model, tools = original()
    started = RunStarted(
        run_id=RUN,
        manifest=manifest_for(model, tools),
        messages=[{"role": "user", "content": "go"}],
    )
    await craft(tmp_path, RUN, [started])
    changed = tether.ScriptedModel(SCRIPT, name="claude-other")
    async with Supervisor(tether.FileStore(tmp_path), model=changed, tools=tools) as sup:
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        assert "claude-other" in (await sup.inspect(RUN)).reason
    assert changed.calls == 0
    assert [type(e) for e in await read_events(tmp_path, RUN)] == [RunStarted, Parked]


async def confirm() -> str:
    """Ask a person to confirm."""
    return "confirmed"


VERSIONED_SCRIPT: list[Any] = [
    [use("toolu_c", "confirm")],
    [use("toolu_f", "fetch", {"url": "x"})],
    "done",
]


def versioned(*fetches: tuple[Callable[..., Awaitable[str]], str]) -> tether.ToolRegistry:
    tools = registry(*fetches)
    tools.register(confirm, approval=True, policy="rerun")
    return tools


async def test_old_runs_finish_on_their_pinned_version_while_new_runs_get_the_latest(
    tmp_path: pathlib.Path,
) -> None:
    # Deployed with version 1 only; the run parks (waiting for approval) on its first turn.
    old_tools = versioned((fetch_str, "1"))
    async with Supervisor(
        tether.FileStore(tmp_path), model=tether.ScriptedModel(VERSIONED_SCRIPT), tools=old_tools
    ) as sup:
        await sup.start("old", "fetch x (old)")
        assert await sup.wait("old", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    # The next deployment keeps version 1 and adds version 2.
    new_tools = versioned((fetch_v2, "2"), (fetch_str, "1"))
    model = RecordingModel(tether.ScriptedModel(VERSIONED_SCRIPT))
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=new_tools) as sup:
        assert await sup.wait("old", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide("old", "toolu_c", approved=True, by="priya")
        assert await sup.wait("old", timeout=WAIT) is RunStatus.DONE
        old_view = await sup.inspect("old")

        await sup.start("new", "fetch x (new)")
        assert await sup.wait("new", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide("new", "toolu_c", approved=True, by="priya")
        assert await sup.wait("new", timeout=WAIT) is RunStatus.DONE
        new_view = await sup.inspect("new")

    assert results_by_id(old_view.messages)["toolu_f"]["content"] == "page x"
    assert results_by_id(new_view.messages)["toolu_f"]["content"] == "page x (v2)"

    old_pins = of_type(await read_events(tmp_path, "old"), RunStarted)[0].manifest.tools
    new_pins = of_type(await read_events(tmp_path, "new"), RunStarted)[0].manifest.tools
    assert {(p.name, p.version) for p in old_pins} == {("fetch", "1"), ("confirm", "1")}
    assert {(p.name, p.version) for p in new_pins} == {("fetch", "2"), ("confirm", "1")}

    # Each run's model calls described the tools it pinned.
    v1 = new_tools.get("fetch", "1").definition()
    v2 = new_tools.get("fetch", "2").definition()
    assert v1 != v2
    for request in model.requests:
        prompt = request["messages"][0]["content"]
        assert (v1 if "(old)" in prompt else v2) in request["tools"]
        assert (v2 if "(old)" in prompt else v1) not in request["tools"]
    assert len(model.requests) == 2 + 3  # old: the two answers it still needed; new: all three
    for run_id in ("old", "new"):
        events = await read_events(tmp_path, run_id)
        assert len(of_type(events, ModelResponse)) == 3
        assert len(of_type(events, ToolStarted)) == 2


async def test_a_parked_run_on_a_changed_contract_stops_when_it_would_continue(
    tmp_path: pathlib.Path,
) -> None:
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=tether.ScriptedModel(VERSIONED_SCRIPT),
        tools=versioned((fetch_str, "1")),
    ) as sup:
        await sup.start(RUN, "fetch x")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL

    changed = versioned((fetch_int, "1"))
    model = tether.ScriptedModel(VERSIONED_SCRIPT)
    async with Supervisor(tether.FileStore(tmp_path), model=model, tools=changed) as sup:
        # Parked runs are not driven by the sweep; the check comes when the run would move on.
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        await sup.decide(RUN, "toolu_c", approved=True, by="priya")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        view = await sup.inspect(RUN)
    assert "changed its contract" in view.reason
    assert model.calls == 0
    assert of_type(await read_events(tmp_path, RUN), ToolStarted) == []


async def test_app_version_is_pinned_and_enforced_only_when_strict(tmp_path: pathlib.Path) -> None:
    store = tether.FileStore(tmp_path)
    model, tools = original()
    async with Supervisor(store, model=model, tools=tools, app_version="1.0") as sup:
        await sup.start(RUN, "hi")
        await sup.wait(RUN, timeout=WAIT)
    started = of_type(await read_events(tmp_path, RUN), RunStarted)[0]
    assert started.manifest.app_version == "1.0"

    await craft_dangling(tmp_path, "run-2", model=model, tools=tools, block=FETCH_CALL)
    events = await read_events(tmp_path, "run-2")
    pinned = of_type(events, RunStarted)[0].manifest.app_version
    model, tools = original()
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=model,
        tools=tools,
        app_version=pinned + "-next",
        strict_app_version=True,
    ) as sup:
        assert await sup.wait("run-2", timeout=WAIT) is RunStatus.NEEDS_ATTENTION
        reason = (await sup.inspect("run-2")).reason
    assert "pinned app version" in reason
    assert_parked_for(await read_events(tmp_path, "run-2"), events, reason)

    model, tools = original()
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, app_version=pinned + "-next"
    ) as sup:
        assert await sup.wait("run-2", timeout=WAIT) is RunStatus.DONE
