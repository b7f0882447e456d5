"""The public surface: what ``__all__`` promises is there, and nothing public is left out."""

from __future__ import annotations

import inspect
import types

import pytest

import tether
import tether.bench
import tether.journal
import tether.mcp
import tether.operate
import tether.otel
import tether.testing

MODULES = [
    tether,
    tether.bench,
    tether.journal,
    tether.mcp,
    tether.operate,
    tether.otel,
    tether.testing,
]


def isort_key(name: str) -> tuple[int, str]:
    """Constants, then classes, then everything else, each alphabetical (ruff's RUF022 order)."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def public_definitions(module: types.ModuleType) -> set[str]:
    """Names of the public classes and functions defined in tether and bound in ``module``."""
    found = set()
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if getattr(value, "__module__", "").split(".")[0] == "tether":
            found.add(name)
    return found


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
def test_every_public_class_and_function_is_in_all(module: types.ModuleType) -> None:
    assert public_definitions(module) - set(module.__all__) == set()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_star_import_gives_exactly_all(module: types.ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(module.__all__)


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
    assert issubclass(tether.testing.FaultyFileOps, tether.journal.lowlevel.FileOps)
    assert tether.testing.FaultyFileOps.__module__.startswith("tether.testing")


def test_version_is_a_string() -> None:
    assert isinstance(tether.__version__, str)
    assert tether.__version__
