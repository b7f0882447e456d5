"""The shape of an API request body, checked against the installed SDK's own types.

Used by the strict fakes of the Anthropic Messages API and of OpenAI's Chat Completions and
Responses APIs (both SDKs are generated the same way: request bodies are ``TypedDict``s,
answers pydantic models). The real APIs validate request bodies strictly: unknown keys at any
level are refused with ``Extra inputs are not permitted``, every error names the path of the
offending value, and content blocks (like tools and thinking configs) are a union tagged by
``type`` whose tag appears in that path, e.g. ``messages.0.content.0.image.source.base64.
media_type: Input should be 'image/jpeg', ...`` or ``thinking.enabled.budget_tokens: ...``.

``pydantic.TypeAdapter(MessageCreateParamsNonStreaming)`` alone does not do that, as checked
against the installed pydantic 2.13 and SDK 2.14 (and the same holds for the ``openai`` SDK's
``CompletionCreateParams`` and ``ResponseCreateParams``):

- the SDK's TypedDicts carry no pydantic config, so unknown keys are silently dropped (and
  ``TypeAdapter(..., config=ConfigDict(extra="forbid"))`` is refused for a TypedDict);
- ``Iterable[...]`` fields (``messages``, ``content``, ``tools``, ``system``, ``input``)
  validate lazily into a ``ValidatorIterator``: nothing inside ``messages`` is looked at
  unless iterated;
- the content unions are not discriminated, so an error lists every member of the union.

So ``check_shape`` follows the SDK's annotations itself: every TypedDict (and every pydantic
model: content blocks the SDK lets a caller pass back as response models, and the answers a
fake sends) refuses keys it does not declare; a union whose members all declare a ``Literal``
``type`` (or ``role``) dispatches on it; arrays must be JSON arrays; and each scalar goes
through a strict pydantic ``TypeAdapter``, whose messages are the ones the API's own
(pydantic) errors carry. Only the first error is reported, as the API does.
"""

from __future__ import annotations

import collections.abc
import datetime
import functools
import types
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import pydantic
import typing_extensions

Path = tuple[str | int, ...]

_NONE = type(None)
_ARRAYS: frozenset[object] = frozenset(
    {list, tuple, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Iterator}
)
_MAPPINGS: frozenset[object] = frozenset({dict, collections.abc.Mapping})


def dotted(path: Path) -> str:
    """``("messages", 3, "content", 0)`` as the API writes it: ``messages.3.content.0``."""
    return ".".join(str(part) for part in path)


class Invalid(Exception):
    """A body the real API refuses with HTTP 400 ``invalid_request_error``."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{dotted(path)}: {detail}" if path else detail)


class _Fields:
    """The keys one object type declares: wire name -> (type, required)."""

    def __init__(self, fields: dict[str, tuple[object, bool]], *, extra_allowed: bool) -> None:
        # ``type`` first, so a block of the wrong kind says so before listing what it lacks.
        self.fields = dict(sorted(fields.items(), key=lambda item: item[0] != "type"))
        self.extra_allowed = extra_allowed


def check_shape(value: object, tp: object, path: Path = ()) -> None:
    """Raise ``Invalid`` at the first place where ``value`` (parsed JSON) does not fit ``tp``."""
    origin = get_origin(tp)
    if tp is object or tp is Any:
        return
    if origin is Annotated:
        check_shape(value, get_args(tp)[0], path)
    elif origin is Union or origin is types.UnionType:
        _check_union(value, _flatten(get_args(tp)), path)
    elif typing_extensions.is_typeddict(tp) or _is_model(tp):
        _check_fields(value, _fields_of(tp), path)
    elif origin in _ARRAYS:
        if not isinstance(value, list):
            raise Invalid(path, "Input should be a valid list")
        (item_tp,) = get_args(tp)[:1] or (object,)
        for index, item in enumerate(value):
            check_shape(item, item_tp, (*path, index))
    elif origin in _MAPPINGS or tp is dict:
        if not isinstance(value, dict):
            raise Invalid(path, "Input should be a valid dictionary")
        value_tp = get_args(tp)[1] if get_args(tp) else object
        for key, item in value.items():
            check_shape(item, value_tp, (*path, key))
    else:
        _check_scalar(value, tp, path)


def _is_model(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _flatten(members: tuple[object, ...]) -> tuple[object, ...]:
    flat: list[object] = []
    for member in members:
        while get_origin(member) is Annotated:
            member = get_args(member)[0]
        if get_origin(member) is Union or get_origin(member) is types.UnionType:
            flat.extend(_flatten(get_args(member)))
        elif member not in flat:
            flat.append(member)
    return tuple(flat)


def _check_fields(value: object, tp: object, path: Path) -> None:
    assert isinstance(tp, _Fields)
    if not isinstance(value, dict):
        raise Invalid(path, "Input should be a valid dictionary")
    for key, (field_tp, required) in tp.fields.items():
        if key in value:
            check_shape(value[key], field_tp, (*path, key))
        elif required:
            raise Invalid((*path, key), "Field required")
    if not tp.extra_allowed:
        for key in value:
            if key not in tp.fields:
                raise Invalid((*path, key), "Extra inputs are not permitted")


@functools.cache
def _fields_of(tp: Any) -> _Fields:
    if _is_model(tp):
        return _Fields(
            {
                (info.alias or name): (info.annotation, info.is_required())
                for name, info in tp.model_fields.items()
            },
            extra_allowed=False,  # the SDK's models allow extras when parsing answers; the API
            # refuses them in a request
        )
    hints = typing_extensions.get_type_hints(tp, include_extras=True)
    totality = _totality(tp)
    fields: dict[str, tuple[object, bool]] = {}
    for key, annotation in hints.items():
        required = totality.get(key, True)
        wire = key
        while True:
            origin: object = get_origin(annotation)
            if origin is Required or origin is NotRequired:
                required = origin is Required
                annotation = get_args(annotation)[0]
            elif origin is Annotated:
                for meta in get_args(annotation)[1:]:
                    wire = getattr(meta, "alias", None) or wire
                annotation = get_args(annotation)[0]
            else:
                break
        fields[wire] = (annotation, required)
    config = getattr(tp, "__pydantic_config__", None) or {}
    return _Fields(fields, extra_allowed=config.get("extra") == "allow")


def _totality(tp: Any) -> dict[str, bool]:
    """Whether each key is required by default: its defining TypedDict's ``total``.

    With ``from __future__ import annotations`` (as the SDK writes them) ``__required_keys__``
    is empty on Python 3.11, so it is worked out from ``Required[...]`` and ``total`` here.
    """
    result: dict[str, bool] = {}
    for base in getattr(tp, "__orig_bases__", ()):
        if typing_extensions.is_typeddict(base):
            result.update(_totality(base))
    for key in tp.__annotations__:
        result.setdefault(key, bool(tp.__total__))
    return result


def _tags(tp: object, key: str) -> tuple[tuple[object, ...], bool] | None:
    """The literal values ``tp`` accepts for ``key`` and whether it may be left out."""
    if not (typing_extensions.is_typeddict(tp) or _is_model(tp)):
        return None
    field = _fields_of(tp).fields.get(key)
    if field is None:
        return None
    annotation, required = field
    members = _flatten((annotation,))
    literals = [m for m in members if get_origin(m) is Literal]
    if len(literals) != 1:
        return None
    return get_args(literals[0]), not required or _NONE in members


def _check_union(value: object, members: tuple[object, ...], path: Path) -> None:
    if value is None and _NONE in members:
        return
    options = [member for member in members if member is not _NONE]
    if len(options) == 1:
        check_shape(value, options[0], path)
        return
    for key in ("type", "role"):
        tags = [_tags(option, key) for option in options]
        if all(tag is not None for tag in tags):
            _check_tagged(value, options, tags, key, path)  # type: ignore[arg-type]
            return
    errors: list[tuple[object, Invalid]] = []
    for option in options:
        try:
            check_shape(value, option, path)
        except Invalid as exc:
            errors.append((option, exc))
        else:
            return
    fitting = [error for option, error in errors if isinstance(value, _json_kind(option))]
    raise (fitting or [errors[0][1]])[0]


def _check_tagged(
    value: object,
    options: list[object],
    tags: list[tuple[tuple[object, ...], bool]],
    key: str,
    path: Path,
) -> None:
    """A union tagged by ``key``; the API (a pydantic tagged union) puts a ``type`` tag in the
    path, so ``messages.0.content.1.tool_use.id``; messages (tagged by ``role``) get none."""
    if not isinstance(value, dict):
        raise Invalid(path, "Input should be a valid dictionary or object to extract fields from")
    tag = value.get(key)
    if tag is None:
        candidates = [opt for opt, (_, optional) in zip(options, tags, strict=True) if optional]
        if not candidates:
            raise Invalid(path, f"Unable to extract tag using discriminator '{key}'")
        label = str(tags[options.index(candidates[0])][0][0])
    else:
        candidates = [
            opt
            for opt, (values, _) in zip(options, tags, strict=True)
            if isinstance(tag, str) and tag in values
        ]
        if not candidates:
            known = dict.fromkeys(str(v) for values, _ in tags for v in values)
            expected = ", ".join(f"'{v}'" for v in known)
            raise Invalid(
                path,
                f"Input tag '{tag}' found using '{key}' does not match any of the expected "
                f"tags: {expected}",
            )
        label = str(tag)
    inner = (*path, label) if key == "type" else path
    first: Invalid | None = None
    for option in candidates:
        try:
            check_shape(value, option, inner)
        except Invalid as exc:
            first = first or exc
        else:
            return
    assert first is not None
    raise first


def _json_kind(tp: object) -> type | tuple[type, ...]:
    origin = get_origin(tp)
    if typing_extensions.is_typeddict(tp) or _is_model(tp) or origin in _MAPPINGS or tp is dict:
        return dict
    if origin in _ARRAYS:
        return list
    if origin is Literal:
        return tuple({type(arg) for arg in get_args(tp)})
    return tp if isinstance(tp, type) else object


@functools.cache
def _adapter(tp: Any) -> pydantic.TypeAdapter[Any] | None:
    try:
        return pydantic.TypeAdapter(tp)
    except (pydantic.PydanticSchemaGenerationError, TypeError):
        return None  # a Python-only type (a file object, a path): no JSON value fits it


def _check_scalar(value: object, tp: object, path: Path) -> None:
    adapter = _adapter(tp)
    if adapter is None:
        raise Invalid(path, f"Input should be a valid {getattr(tp, '__name__', tp)}")
    try:
        # Strict, as JSON has no coercions to offer; times arrive as ISO strings, though.
        adapter.validate_python(value, strict=tp not in (datetime.datetime, datetime.date))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        raise Invalid((*path, *error["loc"]), error["msg"]) from None
