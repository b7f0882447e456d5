"""Where one package of tether may reach into another: its public modules, or a named seam.

A private module (``tether.journal._store``) is its package's business: another package that
imports it couples itself to whatever that module happens to hold today. What another package
needs beyond the public names goes through a module named for that seam, declared here with
what it is for (and described in docs/design/layout.md#seams). Adding an import across a
package that is neither is a test failure until the seam is named.

Also checked: the ground floor (the top-level modules every package builds on) imports no
package at run time, and no package's modules import each other in a circle at run time.
Imports only for type checkers (``if TYPE_CHECKING:``) do not count: they load nothing.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict
from collections.abc import Iterator

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "tether"
LAYOUT = SRC.parent.parent / "docs" / "design" / "layout.md"

GROUND_FLOOR = {
    "tether._backoff": "exponential backoff with jitter",
    "tether._errors": "every error tether raises",
    "tether._failpoints": "the runtime's failpoints and the environment's crash-point killer",
    "tether._public": "publishing a package's names (and importing them on demand)",
    "tether._version": "the version",
}
"""Top-level modules that every package may use, and that import no package at run time."""

SEAMS = {
    "tether._store_url": "naming a store in one string (a directory or a postgresql:// URL)",
    "tether.journal._backend": "what another store shares with the file store",
    "tether.journal._descriptors": "file-descriptor back-pressure (file store and supervisor)",
    "tether.journal._layout": "a FileStore's files, for the tools that work on them",
    "tether.journal._records": "the records' codec and vocabulary",
    "tether.models._base": "the model seam: the Model protocol and what it returns",
    "tether.models._openai_errors": "which errors of OpenAI's APIs are transient",
    "tether.models._transcript": "read-only messages, for a model that keeps them",
    "tether.operate._deploy": "deploy plans: repin, the workers that can take a run",
    "tether.operate._display": "what the command line and the console show of runs",
    "tether.postgres._admin": "removing runs and blobs from a database (tether gc)",
    "tether.postgres._connection": "which driver errors mean the database is out of reach",
    "tether.supervisor._contracts": "contracts: pinned against offered, advertised by workers",
    "tether.supervisor._status": "the one status decision and the waits it reads",
    "tether.supervisor._verbs": "the operator's verbs and recording an answer",
    "tether.supervisor._worker": "the worker process (tether worker)",
    "tether.testing._harness": "the crash harness's parts the demo and tether crashtest use",
    "tether.tools._adapters": "what tools made from other descriptions share with @tool",
    "tether.tools._compat": "what counts as a compatible change of a tool",
    "tether.web._serving": "serving the console (tether serve)",
}
"""Private modules another package may import, each with what crosses there."""


def modules() -> Iterator[tuple[str, bool, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        yield name, is_package, ast.parse(path.read_text(encoding="utf-8"))


KNOWN = {name for name, _, _ in modules()}


def package(name: str) -> str:
    """``tether.journal._store`` -> ``tether.journal``; a top-level module is its own."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def runtime_imports(tree: ast.Module) -> Iterator[ast.ImportFrom | ast.Import]:
    """Every import that runs (at module level or in a function), not those for type checkers."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.ImportFrom, ast.Import)) and id(node) not in skip:
            yield node


def targets(name: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> Iterator[str]:
    """The tether modules (or ``module.name`` for a name) an import statement loads."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name.startswith("tether"))
        return
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    if not module.startswith("tether"):
        return
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        yield sub if sub in KNOWN else f"{module}:{alias.name}"


def is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def crossings() -> Iterator[tuple[str, str]]:
    """``(importer, target)`` for each runtime import of another package's module or name."""
    for name, is_package, tree in modules():
        for node in runtime_imports(tree):
            for target in targets(name, is_package, node):
                module = target.partition(":")[0]
                if package(module) != package(name):
                    yield name, target


def test_another_package_is_reached_through_its_public_modules_or_a_named_seam() -> None:
    stray = []
    for importer, target in crossings():
        module, _, attr = target.partition(":")
        if attr.startswith("_") and not attr.startswith("__"):
            stray.append(f"{importer} imports the private name {attr} of {module}")
        elif is_private(module) and module not in GROUND_FLOOR and module not in SEAMS:
            stray.append(f"{importer} imports {target.replace(':', '.')}")
    assert stray == []


def test_on_demand_names_come_from_public_modules_or_seams() -> None:
    """The lazy tables (``ON_DEMAND = {name: module}``) cross packages too."""
    stray = []
    for name, _, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ON_DEMAND" for t in node.targets
            ):
                assert isinstance(node.value, ast.Dict)
                for value in node.value.values:
                    assert isinstance(value, ast.Constant)
                    assert isinstance(value.value, str)
                    module = value.value
                    if (
                        package(module) != package(name)
                        and is_private(module)
                        and module not in SEAMS
                    ):
                        stray.append(f"{name} loads {module}")
    assert stray == []


def test_every_seam_is_used_and_described() -> None:
    used = {target.partition(":")[0] for _, target in crossings()}
    assert {s for s in SEAMS if s not in used} == set(), "a seam nothing crosses: remove it"
    layout = LAYOUT.read_text(encoding="utf-8")
    assert [s for s in SEAMS if f"`{s}`" not in layout] == []


def test_the_ground_floor_imports_no_package() -> None:
    upward = []
    for name, is_package, tree in modules():
        if name not in GROUND_FLOOR:
            continue
        for node in runtime_imports(tree):
            for target in targets(name, is_package, node):
                module = target.partition(":")[0]
                if module not in GROUND_FLOOR and module != "tether":
                    upward.append(f"{name} imports {module}")
    assert upward == []


def test_no_package_imports_itself_in_a_circle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, is_package, tree in modules():
        for node in runtime_imports(tree):
            for target in targets(name, is_package, node):
                module = target.partition(":")[0]
                inside = module in KNOWN and package(module) == package(name)
                # (a module's own package __init__ only re-exports: it is not a step back)
                if inside and module not in (name, package(name)):
                    graph[name].add(module)
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []
