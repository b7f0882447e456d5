"""Tools registered from a JSON schema and an async callable (how MCP tools are registered)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

import pytest

from tether._errors import ToolArgumentsError, ToolDefinitionError, UnknownToolError
from tether.tools import ContentBlocks, ReplayPolicy, ToolContext, ToolRegistry

CTX = ToolContext(run_id="run-1", call_id="toolu_9", attempt=1)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": ["number", "null"]},
        "flags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["ticket"],
    "additionalProperties": False,
}


async def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"args": args, "key": ctx.idempotency_key}


def registered(**options: Any) -> ToolRegistry:
    tools = ToolRegistry()
    tools.register_schema(echo, name="look_up", input_schema=SCHEMA, **options)
    return tools


async def test_a_schema_tool_is_called_with_its_arguments_and_the_context() -> None:
    spec = registered(description="Look a ticket up.", policy="rerun").get("look_up")
    assert spec.definition() == {
        "name": "look_up",
        "description": "Look a ticket up.",
        "input_schema": SCHEMA,
    }
    assert spec.policy is ReplayPolicy.RERUN
    assert spec.takes_ctx
    out = await spec.invoke({"ticket": "K-1", "count": 2}, CTX)
    assert out == {"args": {"ticket": "K-1", "count": 2}, "key": "run-1:toolu_9"}


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "Object missing required field `ticket`"),
        ({"ticket": 7}, "Expected `string`, got `integer` - at `$.ticket`"),
        ({"ticket": "K", "count": 1.5}, "Expected `integer`, got `number` - at `$.count`"),
        ({"ticket": "K", "count": True}, "Expected `integer`, got `boolean` - at `$.count`"),
        ({"ticket": "K", "ratio": "x"}, "Expected `number | null`, got `string` - at `$.ratio`"),
        ({"ticket": "K", "other": 1}, "Object contains unknown field `other`"),
    ],
)
def test_arguments_that_do_not_fit_the_schema_are_refused(
    args: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ToolArgumentsError) as info:
        registered().get("look_up").validate(args)
    assert info.value.reason == problem


def test_arguments_that_fit_are_accepted_as_a_copy() -> None:
    args = {"ticket": "K", "count": 3, "ratio": None, "flags": ["a"]}
    checked = registered().get("look_up").validate(args)
    assert checked == args
    checked["flags"].append("b")
    assert args["flags"] == ["a"]  # the journaled input stays as the model sent it


def test_a_fuller_check_runs_after_the_schema_check() -> None:
    def no_empty(args: dict[str, Any]) -> str | None:
        return "ticket must not be empty" if not args["ticket"] else None

    spec = registered(check_args=no_empty).get("look_up")
    spec.validate({"ticket": "K"})
    with pytest.raises(ToolArgumentsError, match="ticket must not be empty"):
        spec.validate({"ticket": ""})


def test_the_schema_hash_covers_the_schema_and_description() -> None:
    base = registered().get("look_up").schema_hash
    assert registered(description="other").get("look_up").schema_hash != base
    tools = ToolRegistry()
    changed = {**SCHEMA, "required": ["ticket", "count"]}
    tools.register_schema(echo, name="look_up", input_schema=changed)
    assert tools.get("look_up").schema_hash != base
    assert registered().get("look_up").schema_hash == base


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ([], "input_schema must be a dict"),
        ({"type": "string"}, "must describe an object"),
        ({"type": "object", "properties": []}, "properties must map names to schemas"),
        ({"type": "object", "required": "a"}, "required must be a list of names"),
        ({"type": "object", "default": object()}, "not JSON-able"),
    ],
)
def test_a_schema_that_is_not_an_object_schema_is_refused(schema: Any, problem: str) -> None:
    with pytest.raises(ToolDefinitionError, match=problem):
        ToolRegistry().register_schema(echo, name="t", input_schema=schema)


def test_the_options_are_checked_as_for_any_tool() -> None:
    def plain(args: dict[str, Any], ctx: ToolContext) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="must be an async function"):
        ToolRegistry().register_schema(plain, name="t", input_schema=SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match="policy 'verify' needs a verify= function"):
        registered(policy="verify")
    with pytest.raises(ToolDefinitionError, match="need approval=True"):
        registered(approval_timeout=5)
    with pytest.raises(ToolDefinitionError, match="retry_on needs retries"):
        registered(retry_on=ConnectionError)
    with pytest.raises(ToolDefinitionError, match="a tool name must be"):
        ToolRegistry().register_schema(echo, name="files.read", input_schema=SCHEMA)
    tools = registered()
    with pytest.raises(ToolDefinitionError, match="already registered"):
        tools.register_schema(echo, name="look_up", input_schema=SCHEMA)


async def test_verify_of_a_schema_tool_gets_the_same_arguments() -> None:
    seen: list[Any] = []

    async def landed(args: dict[str, Any], ctx: ToolContext) -> Any:
        seen.append((args, ctx.attempt))
        return ContentBlocks([{"type": "text", "text": "it landed"}])

    spec = registered(policy="verify", verify=landed).get("look_up")
    result = await spec.check_landed({"ticket": "K"}, CTX)
    assert isinstance(result, ContentBlocks)
    assert result.blocks == [{"type": "text", "text": "it landed"}]
    assert seen == [({"ticket": "K"}, 1)]


async def test_an_error_content_blocks_result_keeps_its_error_flag() -> None:
    async def fails(args: dict[str, Any], ctx: ToolContext) -> ContentBlocks:
        return ContentBlocks([{"type": "text", "text": "no such ticket"}], error=True)

    tools = ToolRegistry()
    tools.register_schema(fails, name="look_up", input_schema=SCHEMA)
    out = await tools.get("look_up").invoke({"ticket": "K"}, CTX)
    assert isinstance(out, ContentBlocks)
    assert out.error
    assert "error=True" in repr(out)


def test_unregister_removes_every_version() -> None:
    tools = registered()
    tools.register_schema(echo, name="look_up", input_schema=SCHEMA, version="2")
    tools.unregister("look_up")
    assert "look_up" not in tools
    with pytest.raises(UnknownToolError):
        tools.unregister("look_up")


class Source:
    """A tool source that registers one tool each time it opens, and counts its openings."""

    def __init__(self) -> None:
        self.events: list[str] = []

    @asynccontextmanager
    async def _opened(self, registry: ToolRegistry) -> Any:
        self.events.append("open")
        if "look_up" in registry:
            registry.unregister("look_up")
        registry.register_schema(echo, name="look_up", input_schema=SCHEMA)
        try:
            yield self
        finally:
            self.events.append("close")

    def opened(self, registry: ToolRegistry) -> Any:
        return self._opened(registry)


async def test_sources_open_once_for_nested_openers_and_close_after_the_last() -> None:
    tools = ToolRegistry()
    source = Source()
    tools.add_source(source)
    assert "look_up" not in tools
    async with tools.open_sources():
        assert "look_up" in tools
        async with tools.open_sources():
            assert source.events == ["open"]
        assert source.events == ["open"]
    assert source.events == ["open", "close"]
    async with tools.open_sources():  # opened again: registers afresh
        pass
    assert source.events == ["open", "close", "open", "close"]
