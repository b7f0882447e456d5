"""The rule for when a changed contract can take over from the one a started run pinned."""

from __future__ import annotations

from typing import Any

import pytest

from tether.tools._compat import incompatibility


def schema(props: dict[str, Any], required: list[str], **more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
        **more,
    }


OLD = schema({"customer": {"type": "string", "description": "who"}}, ["customer"])


@pytest.mark.parametrize(
    ("new", "why"),
    [
        (OLD, None),
        (
            schema({"customer": {"type": "string", "description": "the customer"}}, ["customer"]),
            None,
        ),
        (
            schema(
                {"customer": {"type": "string"}, "channel": {"type": "string", "default": "e"}},
                ["customer"],
            ),
            None,
        ),
        (schema({"customer": {"type": "string"}}, []), None),  # no longer required
        (schema({"client": {"type": "string"}}, ["client"]), "parameter 'customer' was removed"),
        (schema({"customer": {"type": "integer"}}, ["customer"]), "parameter 'customer' changed"),
        (
            schema({"customer": {"type": "string", "default": "x"}}, ["customer"]),
            "parameter 'customer' changed",
        ),
        (
            schema({"customer": {"type": "string", "enum": ["a"]}}, ["customer"]),
            "parameter 'customer' changed",
        ),
        (
            schema(
                {"customer": {"type": "string"}, "channel": {"type": "string"}},
                ["customer", "channel"],
            ),
            "channel became required",
        ),
        ({**OLD, "additionalProperties": True}, "the schema changed beyond its parameters"),
    ],
)
def test_what_may_take_over(new: dict[str, Any], why: str | None) -> None:
    got = incompatibility(OLD, new)
    if why is None:
        assert got is None
    else:
        assert got is not None
        assert why in got


def test_a_parameter_named_like_a_descriptive_key_is_still_a_parameter() -> None:
    old = schema({"title": {"type": "string"}}, ["title"])
    assert incompatibility(old, schema({}, [])) == "parameter 'title' was removed"


def test_an_old_pin_without_its_schema_is_never_compatible() -> None:
    assert "cannot be judged" in (incompatibility(None, OLD) or "")
