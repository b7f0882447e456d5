"""Input schemas generated from signatures."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, Optional

import msgspec

from tether.tools import ToolContext, ToolRegistry


class Address(msgspec.Struct):
    """A postal address."""

    street: str
    zip: str | None = None


@dataclasses.dataclass
class LineItem:
    sku: str
    quantity: int = 1


@dataclasses.dataclass
class Order:
    """An order to place."""

    items: list[LineItem]
    gift: bool = False


class Category(msgspec.Struct):
    name: str
    children: list[Category] = []


def schema_of(tools: ToolRegistry, name: str) -> dict[str, Any]:
    return tools.get(name).input_schema


def test_scalar_and_container_types() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def everything(
        text: str,
        count: int,
        ratio: float,
        flag: bool,
        tags: list[str],
        stock: dict[str, int],
        ctx: ToolContext,
        note: str | None = None,
        legacy: Optional[int] = None,  # noqa: UP045
        mode: Literal["fast", "careful"] = "fast",
        limit: int = 10,
    ) -> dict[str, Any]:
        return {}

    assert schema_of(tools, "everything") == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "stock": {"type": "object", "additionalProperties": {"type": "integer"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "legacy": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "mode": {"enum": ["careful", "fast"], "default": "fast"},
            "limit": {"type": "integer", "default": 10},
        },
        "required": ["text", "count", "ratio", "flag", "tags", "stock"],
        "additionalProperties": False,
    }


def test_context_parameter_is_left_out_whatever_its_name() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def act(target: str, call: ToolContext) -> None:
        return None

    schema = schema_of(tools, "act")
    assert list(schema["properties"]) == ["target"]
    assert schema["required"] == ["target"]
    assert tools.get("act").takes_ctx is True


def test_struct_and_nested_dataclass_parameters_are_inlined() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def ship(order: Order, to: Address) -> dict[str, Any]:
        return {}

    schema = schema_of(tools, "ship")
    assert "$defs" not in schema
    assert "$ref" not in str(schema)
    assert schema["required"] == ["order", "to"]
    assert schema["properties"]["to"] == {
        "title": "Address",
        "description": "A postal address.",
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["street"],
    }
    assert schema["properties"]["order"] == {
        "title": "Order",
        "description": "An order to place.",
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "title": "LineItem",
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string"},
                        "quantity": {"type": "integer", "default": 1},
                    },
                    "required": ["sku"],
                },
            },
            "gift": {"type": "boolean", "default": False},
        },
        "required": ["items"],
    }


def test_parameter_descriptions_and_constraints_come_from_annotated_meta() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def page(
        query: Annotated[str, msgspec.Meta(description="Words to search for.")],
        to: Annotated[Address, msgspec.Meta(description="Where to.")],
        size: Annotated[int, msgspec.Meta(ge=1, le=50)] = 10,
    ) -> list[str]:
        return []

    props = schema_of(tools, "page")["properties"]
    assert props["query"] == {"type": "string", "description": "Words to search for."}
    assert props["size"] == {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
    # A field's own description overrides the type's docstring when the $ref is inlined.
    assert props["to"]["description"] == "Where to."
    assert props["to"]["title"] == "Address"


def test_recursive_types_keep_a_top_level_defs() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def file_under(category: Category) -> None:
        return None

    schema = schema_of(tools, "file_under")
    assert schema["type"] == "object"
    assert schema["properties"]["category"] == {"$ref": "#/$defs/Category"}
    assert schema["$defs"]["Category"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Category"
    }


def test_no_parameters_gives_an_empty_object() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def ping() -> str:
        return "pong"

    assert schema_of(tools, "ping") == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_input_schema_is_a_fresh_copy() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    tools.get("echo").input_schema["properties"].clear()
    assert tools.get("echo").input_schema["properties"] == {"text": {"type": "string"}}
    tools.definitions()[0]["input_schema"]["required"].clear()
    assert tools.definitions()[0]["input_schema"]["required"] == ["text"]
