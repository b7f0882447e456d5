"""How the public names present themselves: the module they report, and names loaded late.

Code lives in private modules and each public package re-exports its names, so a class would
otherwise report where it happens to be defined (``tether.journal._store.FileStore``) in reprs,
tracebacks, pickles and documentation. ``publish`` makes it report where people import it from.
The rule (kept by ``tests/test_public_api.py``): an object's ``__module__`` is the most specific
public module that exports it under its own name. Each package publishes its ``__all__`` as its
``__init__`` ends; a package always finishes importing before the packages that re-export from
it continue, so a name published once (by the more specific package) is left alone after.

``on_demand`` gives a package the module ``__getattr__`` that imports a name's module the
first time the name is used (adapters and stores most programs never use:
``import tether`` does not pay for them), and publishes it there as ``publish`` would.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def publish(module: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` for the classes and functions of ``names`` in
    ``namespace`` that still report a private module of tether (one with a ``_`` part).

    A class's string annotations (``from __future__ import annotations``) are resolved first,
    in the module that defines it: msgspec and ``typing.get_type_hints`` look names up in the
    module a class reports, which does not hold the private names its fields use.
    """
    for name in names:
        value = namespace.get(name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if value.__name__ != name or not _private(value.__module__):
            continue  # an alias under another name, or published already
        if inspect.isclass(value):
            _resolve_annotations(value)
        value.__module__ = module


def _private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tether" and any(part.startswith("_") for part in parts)


def _resolve_annotations(cls: type) -> None:
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(v, str) for v in own.values()):
        return
    module_globals = vars(sys.modules[cls.__module__])
    resolved = dict(own)
    for field, hint in own.items():
        if isinstance(hint, str):
            try:
                resolved[field] = eval(hint, module_globals, dict(vars(cls)))
            except NameError:  # a name only imported for type checkers: leave it a string
                continue
    cls.__annotations__ = resolved


def on_demand(
    module: str,
    namespace: dict[str, Any],
    sources: Mapping[str, str],
    otherwise: Callable[[str], object] | None = None,
) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports each name of ``sources`` (name to the module that
    defines or exports it) when it is first asked for, keeps it in ``namespace`` and publishes
    it as ``module``'s (see ``publish``); other names go to ``otherwise``, or raise
    ``AttributeError``."""

    def __getattr__(name: str) -> object:
        source = sources.get(name)
        if source is None:
            if otherwise is not None:
                return otherwise(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        publish(module, namespace, [name])
        return value

    return __getattr__
