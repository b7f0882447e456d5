"""Several versions of one tool, pins and schema hashes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tether._errors import UnknownToolError
from tether.journal import ToolPin
from tether.tools import ToolRegistry


def two_versions() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(name="lookup", version="2", policy="rerun")
    async def lookup_v2(email: str, include_orders: bool = False) -> dict[str, Any]:
        """Find a customer by email."""
        return {}

    @tools.tool(name="lookup", version="1", policy="rerun")
    async def lookup_v1(email: str) -> dict[str, Any]:
        """Find a customer."""
        return {}

    @tools.tool
    async def ping() -> str:
        """Check the service."""
        return "pong"

    return tools


def test_get_latest_and_specific_versions() -> None:
    tools = two_versions()
    assert tools.get("lookup").version == "2"
    assert tools.get("lookup", "1").description == "Find a customer."
    assert tools.get("lookup", "2").description == "Find a customer by email."
    assert tools.versions("lookup") == ("1", "2")
    assert tools.versions("ping") == ("1",)


def test_latest_is_by_natural_version_order_not_registration_order() -> None:
    tools = ToolRegistry()
    for version in ["10", "9", "2024-05-01"]:

        async def fn() -> None:
            return None

        tools.register(fn, name="t", version=version)
    assert tools.versions("t") == ("9", "10", "2024-05-01")
    assert tools.get("t").version == "2024-05-01"

    dotted = ToolRegistry()
    for version in ["1.10", "1.9", "1.9.1"]:

        async def fn() -> None:
            return None

        dotted.register(fn, name="t", version=version)
    assert dotted.versions("t") == ("1.9", "1.9.1", "1.10")


def test_unknown_names_and_versions() -> None:
    tools = two_versions()
    with pytest.raises(UnknownToolError, match="'nope': no tool by this name"):
        tools.get("nope")
    with pytest.raises(
        UnknownToolError, match=r"version '3' is not registered \(registered: '1', '2'\)"
    ):
        tools.get("lookup", "3")
    with pytest.raises(UnknownToolError):
        tools.versions("nope")


def test_contains_iter_and_len() -> None:
    tools = two_versions()
    assert "lookup" in tools
    assert ("lookup", "1") in tools
    assert ("lookup", "3") not in tools
    assert "lookup_v1" not in tools
    assert 3 not in tools
    assert [(spec.name, spec.version) for spec in tools] == [("lookup", "2"), ("ping", "1")]
    assert len(tools) == 2


def test_pins_are_the_latest_versions() -> None:
    tools = two_versions()
    lookup, ping = tools.get("lookup", "2"), tools.get("ping")
    assert tools.pins() == [
        ToolPin(
            name="lookup",
            version="2",
            schema_hash=lookup.schema_hash,
            description="Find a customer by email.",
            input_schema=lookup.input_schema,
        ),
        ToolPin(
            name="ping",
            version="1",
            schema_hash=ping.schema_hash,
            description=ping.description,
            input_schema=ping.input_schema,
        ),
    ]
    assert tools.get("lookup", "1").pin().version == "1"


def test_a_version_has_one_pin_shared_by_every_run_and_a_new_version_its_own() -> None:
    """A run's start pins every tool: the same read-only object each time (building it
    copied the schema anew), and a version registered later gets a pin of its own."""
    tools = two_versions()
    first, again = tools.pins(), tools.pins()
    assert all(a is b for a, b in zip(first, again, strict=True))
    lookup = tools.get("lookup", "2")
    assert lookup.pin() is first[0]
    assert lookup.pin().input_schema == lookup.input_schema  # (the spec's own is a fresh copy)
    assert lookup.pin().input_schema is not lookup.input_schema

    @tools.tool(name="lookup", version="3", policy="rerun")
    async def lookup_v3(email: str, limit: int = 10) -> dict[str, Any]:
        """Find customers by email."""
        return {}

    newest = tools.pins()[0]
    assert (newest.version, newest.schema_hash) == ("3", tools.get("lookup", "3").schema_hash)
    assert newest is not first[0]
    assert tools.get("lookup", "2").pin() is first[0]


def test_definitions_for_latest_versions() -> None:
    tools = two_versions()
    assert [d["name"] for d in tools.definitions()] == ["lookup", "ping"]
    lookup = tools.definitions()[0]
    assert set(lookup) == {"name", "description", "input_schema"}
    assert lookup["description"] == "Find a customer by email."
    assert set(lookup["input_schema"]["properties"]) == {"email", "include_orders"}


def test_definitions_for_explicit_pins() -> None:
    tools = two_versions()
    old = tools.get("lookup", "1")
    by_pair = tools.definitions([("ping", "1"), ("lookup", "1")])
    assert [(d["name"], d["description"]) for d in by_pair] == [
        ("ping", "Check the service."),
        ("lookup", "Find a customer."),
    ]
    assert by_pair[1]["input_schema"]["required"] == ["email"]
    assert tools.definitions([old.pin()]) == [old.definition()]
    with pytest.raises(UnknownToolError):
        tools.definitions([("lookup", "7")])


def test_resolve_checks_the_pinned_hash() -> None:
    tools = two_versions()
    pin = tools.get("lookup", "1").pin()
    assert tools.pinned(pin) is tools.get("lookup", "1")
    changed = ToolPin(name="lookup", version="1", schema_hash="0" * 64)
    with pytest.raises(UnknownToolError, match="changed since the run pinned it"):
        tools.pinned(changed)
    with pytest.raises(UnknownToolError, match="changed since the run pinned it"):
        tools.definitions([changed])
    with pytest.raises(UnknownToolError, match="not registered"):
        tools.pinned(ToolPin(name="lookup", version="9", schema_hash=pin.schema_hash))


def registry_with(variant: str) -> ToolRegistry:
    """One tool defined the same way each call, except for what ``variant`` changes."""
    tools = ToolRegistry()
    if variant == "int":

        async def refund(order_id: str, cents: int) -> None:
            """Refund an order."""

    elif variant == "float":

        async def refund(order_id: str, cents: float) -> None:  # type: ignore[misc]
            """Refund an order."""

    elif variant == "description":

        async def refund(order_id: str, cents: int) -> None:
            """Refund part of an order."""

    tools.register(refund)
    return tools


def test_schema_hash_is_stable_across_identical_registries() -> None:
    first = registry_with("int").get("refund")
    second = registry_with("int").get("refund")
    assert first.fn is not second.fn
    assert first.schema_hash == second.schema_hash
    assert len(first.schema_hash) == 64
    int(first.schema_hash, 16)


def test_schema_hash_changes_with_a_parameter_type_or_the_description() -> None:
    base = registry_with("int").get("refund").schema_hash
    assert registry_with("float").get("refund").schema_hash != base
    assert registry_with("description").get("refund").schema_hash != base


def test_schema_hash_changes_with_name_and_version_but_not_policy() -> None:
    async def f(x: int) -> None:
        return None

    tools = ToolRegistry()
    a = tools.register(f, name="a")
    b = tools.register(f, name="b")
    a2 = tools.register(f, name="a", version="2")
    rerun = ToolRegistry().register(f, name="a", policy="rerun", approval=True)
    assert len({a.schema_hash, b.schema_hash, a2.schema_hash}) == 3
    # Policies and approval are how tether runs the tool, not the contract the model sees.
    assert rerun.schema_hash == a.schema_hash


def test_schema_hash_is_pinned_to_its_canonical_form() -> None:
    # A run pins this hash in its journal; if this test fails, every pinned run would see a
    # changed contract on resume. Change the hashing only with a migration.
    async def echo(text: str, times: int = 1) -> str:
        """Repeat text."""
        return text * times

    spec = ToolRegistry().register(echo)
    contract = {
        "name": "echo",
        "version": "1",
        "description": "Repeat text.",
        "input_schema": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "times": {"type": "integer", "default": 1},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    }
    canonical = json.dumps(contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert spec.schema_hash == hashlib.sha256(canonical.encode()).hexdigest()
    assert spec.schema_hash == "c49536e3f1140d3e6c2e31f2d24776254f81115214b8f4edac1f9729b35fe708"
