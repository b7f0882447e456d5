"""When a changed tool contract can take over from the one a started run pinned.

A run's history holds calls the model made under the contract it pinned, and its next answers
will be made under whatever the model is shown next. A new contract can take over only if
every call the old one allowed is still valid under the new, and means the same: the rule is
conservative on purpose, and a tool opts in (``compatible=True``) before it applies.

Allowed: a reworded ``description`` or ``title`` (of the tool or of any parameter), changed
``examples``, a new *optional* parameter, a parameter that was required and now is not.
Anything else is not: a parameter removed, renamed, retyped, given a new default, a new
constraint or enum, a newly required one, ``additionalProperties`` tightened, any change at
the top level of the schema but the properties and ``required``.
"""

from __future__ import annotations

from typing import Any

DESCRIPTIVE = frozenset({"description", "title", "examples"})
"""Schema keys that say what a value means to a reader, not what is valid."""


def incompatibility(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    """Why input schema ``new`` cannot take over from ``old`` for a started run, or ``None``
    when every call valid under ``old`` is valid, and means the same, under ``new``.

    ``old`` is ``None`` for a pin written before contracts were recorded: nothing can be
    judged, so it is never compatible.
    """
    if old is None:
        return "the run's pin predates recorded contracts, so the change cannot be judged"
    old_top = {k: v for k, v in old.items() if k not in ("properties", "required")}
    new_top = {k: v for k, v in new.items() if k not in ("properties", "required")}
    if _plain(old_top) != _plain(new_top):
        return "the schema changed beyond its parameters"
    old_props: dict[str, Any] = old.get("properties") or {}
    new_props: dict[str, Any] = new.get("properties") or {}
    for name, schema in old_props.items():
        if name not in new_props:
            return f"parameter {name!r} was removed"
        if _plain(schema) != _plain(new_props[name]):
            return f"parameter {name!r} changed (type, default or constraints)"
    old_required = set(old.get("required") or ())
    added = set(new.get("required") or ()) - old_required
    if added:
        return f"parameter(s) {', '.join(sorted(added))} became required"
    return None


NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions"})
"""Schema keys whose value maps names (a parameter may be called ``title``) to schemas."""


def _plain(value: Any) -> Any:
    """The schema ``value`` without its descriptive keys, at every depth."""
    if isinstance(value, dict):
        return {
            k: (
                {n: _plain(s) for n, s in v.items()}
                if k in NAMED and isinstance(v, dict)
                else _plain(v)
            )
            for k, v in value.items()
            if k not in DESCRIPTIVE
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
