"""Every way a tool can fail to register, and what the error says."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tether._errors import ToolDefinitionError, ToolError
from tether.tools import ToolContext, ToolRegistry


class Opaque:
    """A type msgspec cannot describe."""


def test_a_definition_error_is_a_tool_error_naming_the_tool() -> None:
    tools = ToolRegistry()

    def sync_tool(x: int) -> int:
        return x

    with pytest.raises(ToolDefinitionError) as info:
        tools.register(sync_tool)  # type: ignore[arg-type]
    assert isinstance(info.value, ToolError)
    assert info.value.tool == "sync_tool"
    assert "must be an async function (async def)" in info.value.reason
    assert "sync_tool" not in tools


def test_non_async_function_through_the_decorator() -> None:
    tools = ToolRegistry()
    with pytest.raises(ToolDefinitionError, match=r"'legacy'.*must be an async function"):

        @tools.tool(name="legacy")  # type: ignore[type-var]
        def fetch() -> str:
            return ""


def test_async_generator_is_not_a_tool() -> None:
    async def stream() -> Any:
        yield 1

    with pytest.raises(ToolDefinitionError, match="must be an async function"):
        ToolRegistry().register(stream)


def test_var_positional() -> None:
    async def many(*items: str) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match=r"'many'.*\*items is not allowed"):
        ToolRegistry().register(many)


def test_var_keyword() -> None:
    async def loose(**options: str) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match=r"'loose'.*\*\*options is not allowed"):
        ToolRegistry().register(loose)


def test_positional_only() -> None:
    async def pos(x: int, /) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="parameter 'x' is positional-only"):
        ToolRegistry().register(pos)


def test_missing_annotation() -> None:
    async def untyped(query: str, limit) -> None:  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(ToolDefinitionError, match=r"'untyped'.*parameter 'limit' has no type"):
        ToolRegistry().register(untyped)


def test_annotation_msgspec_cannot_describe() -> None:
    async def takes(handle: Opaque, name: str) -> None:
        return None

    with pytest.raises(
        ToolDefinitionError, match=r"'takes'.*parameter 'handle': no JSON schema for Opaque"
    ):
        ToolRegistry().register(takes)


def test_annotation_that_does_not_resolve() -> None:
    class LocalOnly(msgspec.Struct):
        x: int

    # With postponed annotations, a class local to a function cannot be resolved later.
    async def local(arg: LocalOnly) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match=r"'local'.*cannot resolve the annotations"):
        ToolRegistry().register(local)


def test_default_msgspec_cannot_encode() -> None:
    async def odd(x: int = Opaque()) -> None:  # type: ignore[assignment]
        return None

    with pytest.raises(ToolDefinitionError, match=r"'odd'.*default values"):
        ToolRegistry().register(odd)


def test_mutable_default() -> None:
    async def listy(tags: list[str] = ["a"]) -> None:  # noqa: B006
        return None

    with pytest.raises(ToolDefinitionError, match=r"'listy'.*cannot build the argument type"):
        ToolRegistry().register(listy)


def test_two_context_parameters() -> None:
    async def twice(a: ToolContext, b: ToolContext) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="more than one ToolContext parameter"):
        ToolRegistry().register(twice)


def test_optional_context() -> None:
    async def maybe(ctx: ToolContext | None = None) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="annotate the context parameter as plain"):
        ToolRegistry().register(maybe)


def test_duplicate_name_and_version() -> None:
    tools = ToolRegistry()

    async def first() -> None:
        return None

    async def second() -> None:
        return None

    tools.register(first, name="same")
    tools.register(second, name="same", version="2")
    with pytest.raises(ToolDefinitionError, match="'same': version '1' is already registered"):
        tools.register(second, name="same")
    with pytest.raises(ToolDefinitionError, match="'same': version '01' equals '1'"):
        tools.register(second, name="same", version="01")
    assert tools.get("same", "1").fn is first
    assert tools.versions("same") == ("1", "2")


def test_unknown_policy() -> None:
    async def f() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="'f': unknown policy 'once'; use one of 'rerun'"):
        ToolRegistry().register(f, policy="once")  # type: ignore[arg-type]


def test_unknown_approval_timeout_action() -> None:
    async def f() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="unknown on_approval_timeout 'wait'"):
        ToolRegistry().register(
            f,
            approval=True,
            on_approval_timeout="wait",  # type: ignore[arg-type]
        )


def test_verify_policy_without_verify() -> None:
    async def refund(order_id: str) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="'refund': policy 'verify' needs a verify="):
        ToolRegistry().register(refund, policy="verify")


def test_verify_without_verify_policy() -> None:
    async def landed(order_id: str) -> None:
        return None

    async def refund(order_id: str) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="only used with policy 'verify', not 'escalate'"):
        ToolRegistry().register(refund, verify=landed)
    with pytest.raises(ToolDefinitionError, match="not 'rerun'"):
        ToolRegistry().register(refund, policy="rerun", verify=landed)


async def refund(order_id: str, cents: int, ctx: ToolContext) -> None:
    return None


async def landed_missing(order_id: str, ctx: ToolContext) -> None:
    return None


async def landed_extra(order_id: str, cents: int, reason: str) -> None:
    return None


async def landed_retyped(order_id: str, cents: float) -> None:
    return None


def landed_sync(order_id: str, cents: int) -> None:
    return None


async def landed_star(order_id: str, cents: int, **rest: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("verify", "message"),
    [
        (landed_missing, "same parameters as the tool: missing 'cents'"),
        (landed_extra, "same parameters as the tool: extra 'reason'"),
        (landed_retyped, "'cents' is float, the tool's is int"),
        (landed_sync, "verify function landed_sync must be an async function"),
        (landed_star, r"verify function landed_star: \*\*rest is not allowed"),
    ],
)
def test_verify_with_other_parameters(verify: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message) as info:
        ToolRegistry().register(refund, policy="verify", verify=verify)
    assert info.value.tool == "refund"


@pytest.mark.parametrize(
    "options",
    [
        {"approval_timeout": 60.0},
        {"on_approval_timeout": "escalate"},
    ],
)
def test_approval_options_need_approval(options: dict[str, Any]) -> None:
    async def send() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="need approval=True"):
        ToolRegistry().register(send, **options)


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan"), True, "60"])
def test_approval_timeout_must_be_positive_seconds(timeout: Any) -> None:
    async def send() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="approval_timeout must be a positive number"):
        ToolRegistry().register(send, approval=True, approval_timeout=timeout)


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 65, "émoji"])
def test_bad_names(name: str) -> None:
    async def f() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="1 to 64 letters, digits"):
        ToolRegistry().register(f, name=name)


@pytest.mark.parametrize("version", ["", 2])
def test_bad_versions(version: Any) -> None:
    async def f() -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="'f': version must be a non-empty string"):
        ToolRegistry().register(f, version=version)


def test_a_failed_registration_registers_nothing() -> None:
    tools = ToolRegistry()

    async def f(x) -> None:  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(ToolDefinitionError):
        tools.register(f)
    assert "f" not in tools
    assert list(tools) == []
