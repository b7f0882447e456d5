"""Pages of the documentation site generated from the code when the site is built.

- ``reference/cli.md`` from ``tether.cli.build_parser()``: every command's usage, description
  and options, so the reference cannot drift from the command line;
- ``reference/http-api.md`` from the console's OpenAPI document (``tether/web/openapi.json``);
- ``reference/api/<module>.md`` for every public module (found by walking the package, as
  ``tests/test_public_api.py`` does), each documenting the names whose home is that module and
  linking the names it re-exports to their home page.

mkdocs loads this file through ``hooks:`` in ``mkdocs.yml``. The functions that build the text
are plain functions of the code, so the tests call them too (``tests/docs/``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mkdocs is needed only to build the site, not by the tests of these pages
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files

REPO = Path(__file__).resolve().parents[1]


# --- the public modules ------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Every public module of tether: no component of its name starts with an underscore."""
    import tether

    names = ["tether"]
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def home_of(module: str, name: str) -> str | None:
    """Where ``module.name`` is documented, as an identifier (``tether.journal.FileStore``), or
    ``None`` when it is documented on ``module``'s own page.

    A class or function lives in its ``__module__`` (tether sets it to the most specific public
    module exporting it) under its own ``__name__``; an alias (``tether.demo.Decide``) links to
    the object it names."""
    value = getattr(importlib.import_module(module), name)
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return None
    home, real = str(getattr(value, "__module__", "")), value.__name__
    if home == module and real == name:
        return None
    if home in public_modules() and real in importlib.import_module(home).__all__:
        return f"{home}.{real}"
    return None


def api_page(module: str) -> str:
    """The reference page of one public module."""
    mod = importlib.import_module(module)
    exported: list[str] = list(mod.__all__)
    homes = {name: home_of(module, name) for name in exported}
    own = [n for n in exported if homes[n] is None]
    lines = [f"# `{module}`", ""]
    lines += [f"::: {module}", "    options:", "      show_root_heading: false"]
    if own:
        lines.append("      members:")
        lines += [f"        - {name}" for name in own]
    else:
        lines.append("      members: false")
    lines.append("")
    elsewhere = {n: h for n, h in homes.items() if h is not None}
    if elsewhere:
        lines += [
            "## Re-exported here",
            "",
            f"`{module}` also exports these names, documented where they live:",
            "",
            "| name | is | documented in |",
            "|---|---|---|",
        ]
        for name, home in elsewhere.items():
            page = home.rsplit(".", 1)[0]
            lines.append(f"| `{name}` | [`{home}`][{home}] | [`{page}`]({page}.md) |")
        lines.append("")
    return "\n".join(lines)


# --- the command line --------------------------------------------------------------------------


def _leaf_commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """Every leaf command (``"journal repair"``, ``"gc"``), its parser and its one-line help."""
    out: list[tuple[str, argparse.ArgumentParser, str]] = []
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return out
    helps = {a.dest: a.help or "" for a in subs[0]._choices_actions}
    for name, child in subs[0].choices.items():
        full = f"{prefix} {name}".strip()
        inner = _leaf_commands(child, full)
        out += inner or [(full, child, helps.get(name, ""))]
    return out


def _anchor(command: str) -> str:
    return "tether-" + command.replace(" ", "-")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cli_page() -> str:
    """The command line reference, from the parser itself."""
    import os

    from tether.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal's width
    parser = build_parser()
    lines = [
        "# Command line",
        "",
        "Generated from the parser (`tether.cli.build_parser()`) when this site is built, so",
        "it says what the installed command takes. `tether --help` and `tether COMMAND --help`",
        "print the same.",
        "",
        "Exit codes: 0 success, 1 a problem found or a change refused, 2 bad usage (an invalid",
        "run id included), 3 an unreadable file or an unreachable store.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    leaves = _leaf_commands(parser)
    for command, _, help_text in leaves:
        lines.append(f"| [`tether {command}`](#{_anchor(command)}) | {_cell(help_text)} |")
    lines.append("")
    for command, child, help_text in leaves:
        lines += [f"## `tether {command}` {{#{_anchor(command)}}}", ""]
        usage = child.format_usage().removeprefix("usage: ").rstrip()
        lines += ["```text", usage, "```", ""]
        if child.description:
            lines += [" ".join(child.description.split()), ""]
        elif help_text:
            lines += [help_text[:1].upper() + help_text[1:] + ".", ""]
        rows = []
        for action in child._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if action.option_strings:
                name = ", ".join(action.option_strings)
                if action.nargs != 0:
                    name += f" {action.metavar or action.dest.upper()}"
            else:
                name = str(action.metavar or action.dest)
            help_ = (action.help or "").replace("%(default)s", str(action.default))
            help_ = help_.replace("%%", "%")
            rows.append(f"| `{name}` | {_cell(help_)} |")
        if rows:
            lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return "\n".join(lines)


# --- the console's HTTP API --------------------------------------------------------------------


def _schema_text(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "type" in schema:
        kind = schema["type"]
        if kind == "array":
            return f"array of {_schema_text(schema.get('items', {}), spec)}"
        return f"`{kind}`" if isinstance(kind, str) else " or ".join(f"`{k}`" for k in kind)
    for combo in ("oneOf", "anyOf"):
        if combo in schema:
            return " or ".join(_schema_text(s, spec) for s in schema[combo])
    return "any"


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _fields(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """A table of an object schema's properties."""
    required = set(schema.get("required", []))
    rows = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for field, sub in schema.get("properties", {}).items():
        rows.append(
            f"| `{field}` | {_schema_text(sub, spec)} | {'yes' if field in required else ''} | "
            f"{_cell(sub.get('description', ''))} |"
        )
    return rows


def http_api_page() -> str:
    """The console's HTTP API, from its OpenAPI document."""
    path = REPO / "src" / "tether" / "web" / "openapi.json"
    spec = json.loads(path.read_text())
    info = spec["info"]
    lines = [
        "# Console HTTP API",
        "",
        f"Generated from the console's OpenAPI {spec['openapi']} document",
        "(`src/tether/web/openapi.json`, served by the console at `/api/openapi.json`), which a",
        "test checks against the routes and their answers. See",
        "[the console](../tutorial/console.md) for signing in and the pages.",
        "",
        " ".join(str(info.get("description", "")).split()),
        "",
        "| method | path | what it does |",
        "|---|---|---|",
    ]
    operations = []
    for route, item in spec["paths"].items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "delete", "patch"}:
                continue
            anchor = op.get("operationId") or _slug(f"{method} {route}")
            operations.append((route, method, op, anchor))
            summary = _cell(op.get("summary", ""))
            lines.append(f"| {method.upper()} | [`{route}`](#{anchor.lower()}) | {summary} |")
    lines.append("")
    for route, method, op, anchor in operations:
        lines += [f"## {method.upper()} `{route}` {{#{anchor.lower()}}}", ""]
        if op.get("summary"):
            lines += [op["summary"], ""]
        if op.get("description"):
            lines += [" ".join(op["description"].split()), ""]
        params = op.get("parameters", [])
        if params:
            lines += ["| parameter | in | type | meaning |", "|---|---|---|---|"]
            for p in params:
                kind = _schema_text(p.get("schema", {}), spec)
                lines.append(
                    f"| `{p['name']}` | {p['in']} | {kind} | {_cell(p.get('description', ''))} |"
                )
            lines.append("")
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body:
            schema = body.get("schema", {})
            if schema.get("properties"):
                lines += ["Body, a JSON object:", "", *_fields(schema, spec), ""]
            else:
                lines += [f"Body: {_schema_text(schema, spec)}", ""]
        responses = op.get("responses", {})
        if responses:
            lines += ["| status | meaning | body |", "|---|---|---|"]
            for code, answer in responses.items():
                if "$ref" in answer:
                    ref = answer["$ref"].rsplit("/", 1)[-1]
                    answer = spec["components"]["responses"][ref]
                content = answer.get("content", {})
                schema = next(iter(content.values()), {}).get("schema") if content else None
                shown = _schema_text(schema, spec) if schema else ""
                desc = _cell(answer.get("description", ""))
                lines.append(f"| {code} | {desc} | {shown} |")
            lines.append("")
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in schemas.items():
            lines += [f"### `{name}` {{#{name.lower()}}}", ""]
            if schema.get("description"):
                lines += [" ".join(schema["description"].split()), ""]
            if schema.get("properties"):
                lines += [*_fields(schema, spec), ""]
            else:
                lines += [f"A {_schema_text(schema, spec)}.", ""]
    return "\n".join(lines)


# --- the journal's records ---------------------------------------------------------------------


def _type_text(kind: Any) -> str:
    text = kind.__name__ if isinstance(kind, type) else str(kind)
    return text.replace("typing.", "").replace("tether.journal.", "")


def records_table() -> str:
    """Every event type of the journal's vocabulary: its tag, class and fields."""
    import typing

    import msgspec

    from tether.journal import AnyEvent

    lines = [
        "| record | what it records | fields (beyond `seq` and `at`) |",
        "|---|---|---|",
    ]
    for kind in typing.get_args(AnyEvent):
        tag = kind.__struct_config__.tag
        summary = " ".join((kind.__doc__ or "").split("\n\n")[0].split())
        fields = []
        for f in msgspec.structs.fields(kind):
            if f.name in {"seq", "at"}:
                continue
            text = f"`{f.name}: {_type_text(f.type)}`"
            if f.default is not msgspec.NODEFAULT:
                text = f"{text} = `{f.default!r}`"
            fields.append(text)
        name = f"`{tag}` ([`{kind.__name__}`][tether.journal.{kind.__name__}])"
        lines.append(f"| {name} | {_cell(summary)} | {', '.join(fields)} |")
    return "\n".join(lines)


# --- mkdocs ------------------------------------------------------------------------------------


def generated_pages() -> dict[str, str]:
    """Every generated page, by its path under ``docs/``."""
    pages = {
        "reference/cli.md": cli_page(),
        "reference/http-api.md": http_api_page(),
    }
    for module in public_modules():
        pages[f"reference/api/{module}.md"] = api_page(module)
    return pages


def on_page_markdown(markdown: str, page: Any, config: MkDocsConfig, files: Files) -> str:
    """Put the generated table of records where the journal format page asks for it."""
    return markdown.replace("<!-- records -->", records_table())


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, content in generated_pages().items():
        files.append(File.generated(config, path, content=content))
    return files
