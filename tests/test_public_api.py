"""The public surface of every public module of tether: what ``__all__`` promises is there, in
order, documented, and nothing public is left out.

The rule for ``__module__``: a public class or function reports the most specific public module
that exports it under its own name (``tether.FileStore.__module__ == "tether.journal"``, since
``tether.journal`` exports it and ``tether`` re-exports it; ``tether.TetherError`` reports
``tether``; ``tether.journal.lowlevel.FileOps`` reports ``tether.journal.lowlevel``). The
modules exporting one object under its own name lie on one line, each inside the next, so the
most specific is never in doubt. An object exported under another name (``tether.demo.Crash``,
the harness's ``Kill``) is an alias there and does not count.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import subprocess
import sys
import textwrap
import traceback
import types
import typing
import warnings
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import tether
import tether.journal
import tether.testing
from tether.journal import lowlevel

PUBLIC_MODULES = [
    "tether",
    "tether.bench",
    "tether.cli",
    "tether.demo",
    "tether.integrations",
    "tether.integrations.openai_agents",
    "tether.integrations.pydantic_ai",
    "tether.journal",
    "tether.journal.lowlevel",
    "tether.mcp",
    "tether.models",
    "tether.operate",
    "tether.otel",
    "tether.postgres",
    "tether.supervisor",
    "tether.testing",
    "tether.tools",
    "tether.web",
]
MODULES = [importlib.import_module(name) for name in PUBLIC_MODULES]

REMOVED = (
    "tether.Journal",
    "tether.RunJournal",
    "tether.journal.Journal",
    "tether.journal.RunJournal",
    "tether.journal.BlobStore",
    "tether.journal.Damage",
    "tether.journal.FileOps",
    "tether.journal.GroupCommitter",
    "tether.journal.Scan",
    "tether.Outcome",
    "tether.supervisor.Outcome",
    "tether.demo.Outcome",
    "tether.operate.Waiting",
    "tether.RunStatus.WAITING",
    "tether.ToolRegistry.resolve",
    "tether.FileStore.path",
    "tether.FileStore.where",
)
"""Names of before the renames (nothing had been released): gone, with no shim."""


def isort_key(name: str) -> tuple[int, str]:
    """Constants, then classes, then everything else, each alphabetical (ruff's RUF022 order)."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def is_definition(value: object) -> bool:
    """A class or function defined in tether."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return False
    return str(getattr(value, "__module__", "")).split(".")[0] == "tether"


def public_definitions(module: types.ModuleType) -> set[str]:
    """Names of the public classes and functions defined in tether and bound in ``module``."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and is_definition(value)
    }


def exported() -> Iterator[tuple[str, str, Any]]:
    """``(module, name, object)`` for every name of every public module's ``__all__``."""
    for module in MODULES:
        for name in module.__all__:
            yield module.__name__, name, getattr(module, name)


def _load(path: str) -> Any:
    """``path``'s object: a module's name, or an attribute of one of its classes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise ModuleNotFoundError(path)


def test_every_public_module_is_checked() -> None:
    found = {"tether"}
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    assert sorted(found) == PUBLIC_MODULES


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_names_exist_and_are_unique(module: types.ModuleType) -> None:
    names: list[str] = module.__all__
    assert isinstance(names, list)
    assert names, f"{module.__name__}.__all__ is empty"
    assert all(isinstance(n, str) for n in names)
    assert len(names) == len(set(names)), "duplicates in __all__"
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_is_sorted(module: types.ModuleType) -> None:
    names: list[str] = module.__all__
    assert names in (sorted(names), sorted(names, key=isort_key))


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_lists_nothing_private(module: types.ModuleType) -> None:
    assert [n for n in module.__all__ if n.startswith("_") and n != "__version__"] == []


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_public_class_and_function_is_in_all(module: types.ModuleType) -> None:
    for name in module.__all__:
        getattr(module, name)  # load what a package loads on first use
    assert public_definitions(module) - set(module.__all__) == set()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_star_import_gives_exactly_all(module: types.ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(module.__all__)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_module_and_every_name_it_exports_are_documented(module: types.ModuleType) -> None:
    assert (module.__doc__ or "").strip(), f"{module.__name__} has no docstring"
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)
        if not is_definition(value):
            continue
        doc = (value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__) or ""
        if not doc.strip() or doc.startswith(f"{value.__name__}("):  # a dataclass's own
            undocumented.append(name)
    assert undocumented == []


def test_every_class_and_function_reports_its_most_specific_public_module() -> None:
    exporters: dict[int, list[str]] = {}
    objects: dict[int, Any] = {}
    for module, name, value in exported():
        if is_definition(value) and value.__name__ == name:
            exporters.setdefault(id(value), []).append(module)
            objects[id(value)] = value
    wrong = {}
    for key, modules in exporters.items():
        value = objects[key]
        deepest = max(modules, key=lambda m: m.count("."))
        assert all(deepest == m or deepest.startswith(m + ".") for m in modules), (value, modules)
        if value.__module__ != deepest:
            wrong[value.__qualname__] = (value.__module__, deepest)
        assert getattr(sys.modules[value.__module__], value.__qualname__) is value
    assert wrong == {}


def test_import_tether_leaves_the_tools_the_models_and_the_supervisor_until_used() -> None:
    # What every command reads with comes with ``import tether``; the rest on first use, as
    # names of ``tether`` and as its subpackages, the same objects either way.
    script = textwrap.dedent(
        """
        import sys, tether
        later = ("tether.tools", "tether.models", "tether.supervisor")
        print(sorted(m for m in sys.modules if m.startswith(later)))
        assert tether.ToolSpec is tether.tools.ToolSpec
        assert tether.RunStatus is tether.supervisor.RunStatus
        assert tether.models.ScriptedModel is tether.ScriptedModel
        print(tether.ToolSpec.__module__, tether.RunStatus.__module__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out == ["[]", "tether.tools tether.supervisor"]
    with pytest.raises(AttributeError, match="has no attribute 'toolz'"):
        getattr(tether, "toolz")  # noqa: B009 - a name tether does not have


def test_reprs_and_tracebacks_name_the_public_path() -> None:
    assert repr(tether.FileStore) == "<class 'tether.journal.FileStore'>"
    assert repr(tether.Supervisor) == "<class 'tether.supervisor.Supervisor'>"
    assert repr(lowlevel.FileOps) == "<class 'tether.journal.lowlevel.FileOps'>"
    try:
        raise tether.RunNotFoundError("run-1")
    except tether.RunNotFoundError as exc:
        last = traceback.format_exception(exc)[-1]
    assert last.startswith("tether.RunNotFoundError: ")


def test_records_errors_and_enums_survive_pickling_and_msgspec() -> None:
    ref = tether.journal.BlobRef(digest="0" * 64, size=3, summary="abc")
    result = tether.journal.ToolResult(call_id="c", ok=True, blob=ref, seq=4)
    for value in (result, tether.ReplayPolicy.RERUN, tether.Budgets(max_model_calls=3)):
        assert pickle.loads(pickle.dumps(value)) == value
    error = pickle.loads(pickle.dumps(tether.RunNotFoundError("run-1")))
    assert type(error) is tether.RunNotFoundError
    assert str(error) == str(tether.RunNotFoundError("run-1"))
    for codec in (msgspec.json, msgspec.msgpack):
        assert codec.decode(codec.encode(result), type=tether.journal.AnyEvent) == result
    assert msgspec.json.schema(tether.journal.AnyEvent)["anyOf"]


def test_the_annotations_of_every_exported_class_resolve() -> None:
    """msgspec and ``typing.get_type_hints`` look names up in the module a class reports."""
    failed = {}
    for module, name, value in exported():
        if inspect.isclass(value) and is_definition(value) and value.__module__ == module:
            try:
                typing.get_type_hints(value)
            except NameError as exc:
                failed[f"{module}.{name}"] = str(exc)
    assert failed == {}


@pytest.mark.parametrize("old", REMOVED)
def test_an_old_name_is_gone(old: str) -> None:
    name = old.rpartition(".")[2]
    with pytest.raises(AttributeError, match=f"has no attribute {name!r}|^{name}$"):
        _load(old)


def test_an_unknown_name_is_still_an_attribute_error_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=r"'tether\.journal' has no attribute 'Jornal'"):
            _load("tether.journal.Jornal")


def test_store_is_the_run_store_the_inbox_and_the_blobs_together() -> None:
    from tether.journal import Blobs, Inbox, RunStore, Store
    from tether.postgres import PostgresStore

    def members(protocol: type) -> set[str]:
        return {n for n in protocol.__dict__ if not n.startswith("_")}

    parts = [members(p) for p in (RunStore, Inbox, Blobs)]
    assert all(not (a & b) for a in parts for b in parts if a is not b)
    assert set(Store.__mro__[1:4]) == {RunStore, Inbox, Blobs}
    for store in (tether.FileStore, PostgresStore):
        for part in parts:
            assert part <= set(dir(store)), (store, part - set(dir(store)))


def test_top_level_reexports_are_the_same_objects() -> None:
    for name in tether.__all__:
        if hasattr(tether.journal, name):
            assert getattr(tether, name) is getattr(tether.journal, name), name


def test_errors_share_one_root() -> None:
    errors = [
        getattr(tether, n)
        for n in tether.__all__
        if inspect.isclass(getattr(tether, n)) and issubclass(getattr(tether, n), Exception)
    ]
    assert len(errors) >= 10
    assert all(issubclass(e, tether.TetherError) for e in errors)


def test_faulty_file_ops_is_a_file_ops() -> None:
    assert issubclass(tether.testing.FaultyFileOps, lowlevel.FileOps)
    assert tether.testing.FaultyFileOps.__module__ == "tether.testing"


def test_version_is_a_string() -> None:
    assert isinstance(tether.__version__, str)
    assert tether.__version__
