"""A tool's signature, read once at registration: its argument type and its JSON schema.

The parameters (all but the one annotated ``ToolContext``) become the fields of a keyword-only
``msgspec.Struct`` that forbids unknown fields. That one type both validates the model's
arguments (``msgspec.convert``) and describes them to the model (``msgspec.json.schema``), so
the two can never disagree.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

import msgspec

from .._errors import ToolDefinitionError
from ._context import ToolContext

_REF_PREFIX = "#/$defs/"


@final
@dataclass(frozen=True, kw_only=True)
class Signature:
    """What registration learned from one function's signature.

    Attributes:
        hints: each argument's resolved annotation, by parameter name, in signature order
            (the ``ToolContext`` parameter excluded).
        ctx_param: the name of the ``ToolContext`` parameter, or ``None``.
    """

    hints: dict[str, Any]
    ctx_param: str | None


def read_signature(tool: str, fn: Callable[..., Any], *, what: str) -> Signature:
    """Check ``fn``'s signature and resolve its annotations.

    Args:
        tool: the tool's name, for error messages.
        fn: the function to read.
        what: how errors name ``fn`` ("function" or "verify function").

    Raises:
        ToolDefinitionError: ``fn`` is not an ``async def`` function, takes ``*args``,
            ``**kwargs`` or positional-only parameters, leaves a parameter unannotated, has an
            annotation that does not resolve, or has more than one ``ToolContext`` parameter.
    """
    label = f"{what} {_qualname(fn)}"
    if not inspect.iscoroutinefunction(fn):
        raise ToolDefinitionError(tool, f"{label} must be an async function (async def)")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(tool, f"cannot read the signature of {label}: {exc}") from exc
    try:
        resolved = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # evaluating user annotations can raise anything
        raise ToolDefinitionError(
            tool,
            f"cannot resolve the annotations of {label}: {exc!r} (types named in annotations "
            "must be importable from the function's module)",
        ) from exc

    hints: dict[str, Any] = {}
    ctx_param: str | None = None
    for param in sig.parameters.values():
        where = f"{label}: parameter {param.name!r}"
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolDefinitionError(tool, f"{label}: *{param.name} is not allowed")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            raise ToolDefinitionError(tool, f"{label}: **{param.name} is not allowed")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                tool, f"{where} is positional-only; tools are called with keyword arguments"
            )
        if param.name not in resolved:
            raise ToolDefinitionError(tool, f"{where} has no type annotation")
        hint = resolved[param.name]
        if hint is ToolContext:
            if ctx_param is not None:
                raise ToolDefinitionError(
                    tool,
                    f"{label}: more than one ToolContext parameter ({ctx_param!r}, {param.name!r})",
                )
            ctx_param = param.name
            continue
        if _mentions_context(hint):
            raise ToolDefinitionError(
                tool, f"{where}: annotate the context parameter as plain ToolContext"
            )
        hints[param.name] = hint
    return Signature(hints=hints, ctx_param=ctx_param)


def args_type(tool: str, fn: Callable[..., Any], sig: Signature) -> type[msgspec.Struct]:
    """Build the ``msgspec.Struct`` that holds one call's arguments.

    Raises:
        ToolDefinitionError: a default value msgspec refuses (a non-empty mutable one).
    """
    params = inspect.signature(fn).parameters
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, hint in sig.hints.items():
        default = params[name].default
        if default is inspect.Parameter.empty:
            fields.append((name, hint))
        else:
            fields.append((name, hint, default))
    try:
        return msgspec.defstruct(f"{tool}_args", fields, kw_only=True, forbid_unknown_fields=True)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(tool, f"cannot build the argument type: {exc}") from exc


def input_schema(tool: str, args: type[msgspec.Struct], sig: Signature) -> dict[str, Any]:
    """The JSON schema of ``args`` as one self-contained top-level object schema.

    msgspec answers ``{"$ref": ..., "$defs": {...}}``. The model needs an object at the top, so
    every definition is inlined where it is used. Only recursive types (a ``Node`` holding
    ``list[Node]``) cannot be inlined: their definitions stay under a top-level ``$defs`` and
    are referenced from there.

    Raises:
        ToolDefinitionError: naming the parameter whose annotation (or default) msgspec cannot
            describe.
    """
    try:
        raw = msgspec.json.schema(args)
    except Exception as exc:  # msgspec raises TypeError, or whatever a default's encoding does
        raise ToolDefinitionError(tool, _schema_failure(sig, exc)) from exc
    defs: dict[str, Any] = raw.get("$defs", {})
    root = _ref_name(raw["$ref"])
    recursive = {name for name in defs if _reaches(defs, name, name)}
    schema: dict[str, Any] = _inline(defs[root], defs, recursive)
    schema.pop("title", None)  # "<tool>_args": a name we made up, not the user's
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    if recursive:
        schema["$defs"] = {name: _inline(defs[name], defs, recursive) for name in sorted(recursive)}
    return schema


def _schema_failure(sig: Signature, exc: Exception) -> str:
    for name, hint in sig.hints.items():
        try:
            msgspec.json.schema(hint)
        except Exception as field_exc:
            return f"parameter {name!r}: no JSON schema for {type_name(hint)}: {field_exc}"
    # Every annotation is fine on its own, so a default value is what failed to encode.
    return f"cannot build the JSON schema (check the default values): {exc}"


def _inline(node: Any, defs: dict[str, Any], keep: set[str]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, keep) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX) and _ref_name(ref) not in keep:
        # A $ref may have siblings (a field's own description): they override the target's.
        target = _inline(defs[_ref_name(ref)], defs, keep)
        target.update({k: _inline(v, defs, keep) for k, v in node.items() if k != "$ref"})
        return target
    return {k: _inline(v, defs, keep) for k, v in node.items()}


def _reaches(defs: dict[str, Any], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(_refs(defs[start]))
    while todo:
        name = todo.pop()
        if name == goal:
            return True
        if name not in seen:
            seen.add(name)
            todo.extend(_refs(defs[name]))
    return False


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, list):
        for item in node:
            found |= _refs(item)
    elif isinstance(node, dict):
        for value in node.values():
            found |= _refs(value)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            found.add(_ref_name(ref))
    return found


def _ref_name(ref: str) -> str:
    return ref.removeprefix(_REF_PREFIX)


def _mentions_context(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType, typing.Annotated):
        return any(_mentions_context(arg) for arg in typing.get_args(hint))
    return hint is ToolContext


def type_name(hint: Any) -> str:
    """``int`` for classes, the usual repr (``list[str]``, ``typing.Optional[int]``) otherwise."""
    return hint.__qualname__ if isinstance(hint, type) else repr(hint)


def _qualname(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
