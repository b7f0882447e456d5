"""Validating the model's arguments, invoking tools and their verify functions."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import msgspec
import pytest

from tether._errors import ToolArgumentsError, ToolError
from tether.tools import ToolContext, ToolRegistry

CTX = ToolContext(run_id="run-1", call_id="toolu_9", attempt=2)


class Address(msgspec.Struct):
    street: str
    zip: str | None = None


@dataclasses.dataclass
class Receipt:
    order_id: str
    at: datetime.datetime


class Loose(msgspec.Struct):
    a: int


class Tight(msgspec.Struct, forbid_unknown_fields=True):
    b: int


class Opaque:
    """Something msgspec cannot encode."""


@pytest.fixture
def tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(policy="rerun")
    async def ship(to: Address, count: int, tags: list[str], express: bool = False) -> str:
        return "ok"

    return tools


def test_validate_accepts_good_args_and_fills_defaults(tools: ToolRegistry) -> None:
    kwargs = tools.get("ship").validate({"to": {"street": "Main St 1"}, "count": 3, "tags": ["a"]})
    assert kwargs == {
        "to": Address(street="Main St 1"),
        "count": 3,
        "tags": ["a"],
        "express": False,
    }
    assert isinstance(kwargs["to"], Address)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"to": {"street": "x"}, "count": "3", "tags": []},
            "Expected `int`, got `str` - at `$.count`",
        ),
        ({"to": {"street": 5}, "count": 3, "tags": []}, "at `$.to.street`"),
        ({"to": {"street": "x"}, "count": 3, "tags": [1]}, "at `$.tags[0]`"),
        ({"to": {"street": "x"}, "count": True, "tags": []}, "got `bool` - at `$.count`"),
        ({"to": {"street": "x"}, "tags": []}, "missing required field `count`"),
        ({"to": {"street": "x"}, "count": 3, "tags": [], "color": "red"}, "unknown field `color`"),
    ],
)
def test_validate_rejects_and_names_the_field(
    tools: ToolRegistry, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolArgumentsError, match=r"^tool 'ship': ") as info:
        tools.get("ship").validate(args)
    assert message in info.value.reason
    assert info.value.tool == "ship"


@pytest.mark.parametrize("args", [None, "{}", ["to"], 3])
def test_validate_rejects_args_that_are_not_an_object(tools: ToolRegistry, args: object) -> None:
    with pytest.raises(ToolArgumentsError, match="arguments must be a JSON object"):
        tools.get("ship").validate(args)


async def test_invoke_passes_ctx_only_when_declared() -> None:
    tools = ToolRegistry()
    seen: dict[str, Any] = {}

    @tools.tool
    async def with_ctx(text: str, context: ToolContext) -> dict[str, Any]:
        seen["with"] = context
        return {"key": context.idempotency_key, "text": text}

    @tools.tool
    async def without_ctx(text: str) -> dict[str, Any]:
        seen["without"] = text
        return {"text": text}

    assert await tools.get("with_ctx").invoke({"text": "a"}, CTX) == {
        "key": "run-1:toolu_9",
        "text": "a",
    }
    assert seen["with"] is CTX
    assert await tools.get("without_ctx").invoke({"text": "b"}, CTX) == {"text": "b"}
    assert seen["without"] == "b"


async def test_invoke_validates_before_calling() -> None:
    tools = ToolRegistry()
    calls: list[int] = []

    @tools.tool
    async def bump(by: int) -> None:
        calls.append(by)

    with pytest.raises(ToolArgumentsError):
        await tools.get("bump").invoke({"by": "one"}, CTX)
    assert calls == []


async def test_invoke_converts_results_to_json_values() -> None:
    tools = ToolRegistry()
    at = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    ident = uuid.UUID(int=7)

    @tools.tool
    async def receipt() -> dict[Any, Any]:
        return {
            "receipt": Receipt(order_id="o-1", at=at),
            "address": Address(street="Main"),
            "pair": (1, 2),
            "id": ident,
            "raw": b"\x00\x01",
            3: "int key",
            "nan": float("nan"),
        }

    assert await tools.get("receipt").invoke({}, CTX) == {
        "receipt": {"order_id": "o-1", "at": "2024-05-01T12:00:00Z"},
        "address": {"street": "Main", "zip": None},
        "pair": [1, 2],
        "id": str(ident),
        "raw": "AAE=",
        "3": "int key",
        "nan": None,
    }


async def test_invoke_returns_plain_values_unchanged() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def answer() -> int:
        return 42

    @tools.tool
    async def nothing() -> None:
        return None

    assert await tools.get("answer").invoke({}, CTX) == 42
    assert await tools.get("nothing").invoke({}, CTX) is None


async def test_a_result_that_cannot_be_encoded_is_a_tool_error() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def leak() -> dict[str, Any]:
        return {"handle": Opaque()}

    with pytest.raises(ToolError, match="result cannot be encoded as JSON") as info:
        await tools.get("leak").invoke({}, CTX)
    assert type(info.value) is ToolError
    assert info.value.tool == "leak"


async def test_exceptions_from_the_tool_propagate_unchanged() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def fail() -> None:
        raise ConnectionError("upstream down")

    with pytest.raises(ConnectionError, match="upstream down"):
        await tools.get("fail").invoke({}, CTX)


async def test_check_landed_calls_verify_with_the_same_args_and_key() -> None:
    tools = ToolRegistry()
    ledger: dict[str, dict[str, Any]] = {}

    async def refund_landed(order_id: str, cents: int, ctx: ToolContext) -> Receipt | None:
        if ctx.idempotency_key in ledger:
            return Receipt(order_id=order_id, at=datetime.datetime(2024, 1, 1))
        return None

    @tools.tool(policy="verify", verify=refund_landed)
    async def issue_refund(order_id: str, cents: int, ctx: ToolContext) -> dict[str, Any]:
        ledger[ctx.idempotency_key] = {"order_id": order_id, "cents": cents}
        return {"refunded": cents}

    spec = tools.get("issue_refund")
    args = {"order_id": "o-1", "cents": 500}
    assert await spec.check_landed(args, CTX) is None
    assert await spec.invoke(args, CTX) == {"refunded": 500}
    later = ToolContext(run_id="run-1", call_id="toolu_9", attempt=3)
    assert await spec.check_landed(args, later) == {
        "order_id": "o-1",
        "at": "2024-01-01T00:00:00",
    }


async def test_verify_may_leave_out_the_context() -> None:
    tools = ToolRegistry()

    async def landed(order_id: str) -> dict[str, Any] | None:
        return {"order_id": order_id}

    @tools.tool(policy="verify", verify=landed)
    async def place(order_id: str, ctx: ToolContext) -> dict[str, Any]:
        return {}

    assert await tools.get("place").check_landed({"order_id": "o"}, CTX) == {"order_id": "o"}


async def test_check_landed_validates_args() -> None:
    tools = ToolRegistry()

    async def landed(order_id: str) -> None:
        return None

    @tools.tool(policy="verify", verify=landed)
    async def place(order_id: str) -> None:
        return None

    with pytest.raises(ToolArgumentsError, match=r"\$\.order_id"):
        await tools.get("place").check_landed({"order_id": 1}, CTX)


async def test_check_landed_without_verify_is_a_tool_error() -> None:
    tools = ToolRegistry()

    @tools.tool(policy="rerun")
    async def read() -> None:
        return None

    with pytest.raises(ToolError, match="has no verify function"):
        await tools.get("read").check_landed({}, CTX)


def test_nested_types_keep_their_own_unknown_field_rule() -> None:
    # Only the top level always refuses unknown fields; a nested Struct follows its own config.
    tools = ToolRegistry()

    @tools.tool
    async def f(a: Loose, b: Tight) -> None:
        return None

    spec = tools.get("f")
    assert spec.validate({"a": {"a": 1, "extra": 2}, "b": {"b": 2}})["a"] == Loose(a=1)
    with pytest.raises(ToolArgumentsError, match=r"unknown field `extra` - at `\$.b`"):
        spec.validate({"a": {"a": 1}, "b": {"b": 2, "extra": 3}})
