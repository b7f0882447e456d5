"""Tools described by a JSON schema given as data, not by a Python signature.

A tool from an MCP server arrives as a name, a description and an input schema; the function
that serves it takes the model's arguments as one object. ``build_schema_spec`` makes such a
tool a ``ToolSpec`` like any other: the same option checks (``check_options``), the same
pinned contract (``assemble`` hashes name, version, description and schema), and a check of
the arguments before the function is called.

The check here is deliberately small, so that ``tether.tools`` needs no JSON Schema library:
the arguments are an object, every ``required`` property is there, no property outside
``properties`` when ``additionalProperties`` is ``false``, and each top-level property has its
declared JSON ``type`` (``integer`` is a whole number, ``number`` any number, never a bool).
Anything deeper (nested objects, formats, ``enum``, ``pattern``) is the job of a fuller
validator passed as ``check_args`` (``tether.mcp`` passes ``jsonschema``'s), and of the server.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import msgspec

from .._errors import ToolArgumentsError, ToolDefinitionError
from ._spec import (
    ArgsCheck,
    Caller,
    GivenOptions,
    ToolFunction,
    ToolSpec,
    assemble,
    check_options,
    tool_name,
)

ArgsValidator = Callable[[dict[str, Any]], str | None]
"""A fuller check of a call's arguments: the problem in words, or ``None`` when they fit."""

_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
}


def build_schema_spec(
    fn: ToolFunction,
    *,
    name: str,
    input_schema: dict[str, Any],
    description: str,
    given: GivenOptions,
    check_args: ArgsValidator | None = None,
) -> ToolSpec:
    """Check a schema tool and its options and build its ``ToolSpec``.

    See ``ToolRegistry.register_schema`` for the arguments.

    Raises:
        ToolDefinitionError: naming the tool and what is wrong.
    """
    tool = tool_name(fn, name)
    options = check_options(tool, given)
    verify = given.verify
    _must_be_async(tool, fn, "function")
    if verify is not None:
        _must_be_async(tool, verify, "verify function")
    schema = _object_schema(tool, input_schema)
    if not isinstance(description, str):
        raise ToolDefinitionError(tool, f"description must be a string, got {description!r}")
    return assemble(
        tool,
        options,
        description=description.strip(),
        schema=schema,
        fn=fn,
        verify=verify,
        check=_schema_check(tool, schema, check_args),
        call=_object_caller(fn),
        verify_call=None if verify is None else _object_caller(verify),
        takes_ctx=True,
    )


def _must_be_async(tool: str, fn: object, what: str) -> None:
    if not callable(fn):
        raise ToolDefinitionError(tool, f"the {what} must be callable, got {fn!r}")
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
        raise ToolDefinitionError(
            tool, f"the {what} must be an async function taking (arguments, ctx)"
        )


def _object_schema(tool: str, schema: object) -> dict[str, Any]:
    """A plain-JSON copy of ``schema``, checked to describe an object."""
    if not isinstance(schema, dict):
        raise ToolDefinitionError(tool, f"input_schema must be a dict, got {type(schema).__name__}")
    try:
        plain: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(schema))
    except (TypeError, ValueError, OverflowError) as exc:
        raise ToolDefinitionError(tool, f"input_schema is not JSON-able: {exc}") from exc
    if plain.get("type") != "object":
        raise ToolDefinitionError(
            tool, f'input_schema must describe an object ("type": "object"), got {plain!r:.120}'
        )
    props = plain.get("properties", {})
    required = plain.get("required", [])
    if not isinstance(props, dict) or not all(isinstance(p, dict) for p in props.values()):
        raise ToolDefinitionError(tool, "input_schema's properties must map names to schemas")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolDefinitionError(tool, "input_schema's required must be a list of names")
    return plain


def _schema_check(tool: str, schema: dict[str, Any], fuller: ArgsValidator | None) -> ArgsCheck:
    props: dict[str, dict[str, Any]] = schema.get("properties", {})
    required: list[str] = schema.get("required", [])
    closed = schema.get("additionalProperties") is False

    def check(args: dict[str, Any]) -> dict[str, Any]:
        for field in required:
            if field not in args:
                raise ToolArgumentsError(tool, f"Object missing required field `{field}`")
        for field, value in args.items():
            sub = props.get(field)
            if sub is None:
                if closed:
                    raise ToolArgumentsError(tool, f"Object contains unknown field `{field}`")
                continue
            problem = _type_problem(sub.get("type"), value)
            if problem is not None:
                raise ToolArgumentsError(tool, f"{problem} - at `$.{field}`")
        if fuller is not None:
            problem = fuller(args)
            if problem is not None:
                raise ToolArgumentsError(tool, problem)
        copied: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(args))
        return copied  # the tool's own copy: it cannot change the journaled input

    return check


def _type_problem(declared: object, value: object) -> str | None:
    kinds = [declared] if isinstance(declared, str) else declared
    if not isinstance(kinds, list) or not kinds:
        return None  # no type, or one this check does not read: the fuller check's job
    known = [kind for kind in kinds if isinstance(kind, str) and kind in _JSON_TYPES]
    if len(known) < len(kinds) or any(_JSON_TYPES[kind](value) for kind in known):
        return None
    return f"Expected `{' | '.join(known)}`, got `{_json_type(value)}`"


def _json_type(value: object) -> str:
    for kind in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[kind](value):
            return kind
    return type(value).__name__


def _object_caller(fn: ToolFunction) -> Caller:
    def call(args: dict[str, Any], ctx: Any) -> Any:
        return fn(args, ctx)

    return call
