"""Read the site's pages as a reader would run them: every fenced block, in order.

A page of the tutorial or the how-to guides (the integrations' pages among them) is run top to
bottom in an empty directory of its own, as a newcomer following it would:

- a block with a title (```` ```python title="support.py" ````) is a file to save: it is
  written there under that name;
- a ``sh`` block is run with ``bash -euo pipefail`` and must succeed;
- a ``console`` block holds commands (``$ ...``) and what they print: each command is run and
  its output (standard output and error) must match the lines shown, where ``...`` alone on a
  line stands for any lines and ``...`` inside a line for any text;
- a ``python`` block without a title is a program: it is run and must succeed;
- ``text`` and ``json`` blocks are output or data shown to the reader, not code;
- a block made only of sections of a file (``--8<-- "docs/how-to/shop.py:verify"``) shows
  part of a file the page also includes whole, in a block with a title: it runs as part of
  that file (or part of a crash-test scenario in ``examples/``, which the crash tests run).

The line right before a fence can say more, as an HTML comment the site does not show:

- ``<!-- skip: REASON -->``: not run, for a block that needs an API key or a server (the
  reason is required, and the page says the same to its reader);
- ``<!-- requires: NAME, ... -->``: run only where each NAME is a module that can be
  imported or a program on ``PATH`` (FastAPI, which tether does not depend on; PostgreSQL's
  ``initdb``);
- ``<!-- background: TEXT -->``: a ``sh`` block whose command keeps running (a worker, a
  server): it is started, the page goes on once ``TEXT`` appears in its output, and when the
  page ends it gets ``SIGTERM`` and must exit 0 (a ``tether`` command; another, such as
  uvicorn, may also end by the signal after shutting down).

Anywhere on a page, ``<!-- port: N -->`` says the page talks to a server on port N: the run
replaces N by a free port throughout, so that pages run side by side with anything else on the
machine.

Blocks may include files with the site's snippet syntax (``--8<-- "docs/tutorial/support.py"``,
relative to the repository root): they are expanded here exactly as the site expands them, so
what is run is what is shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RUN_PAGES = ("tutorial", "how-to", "integrations")  # the integrations are how-to guides

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>.*)$")
SNIPPET = re.compile(r'^\s*-{1,}8<-{1,}\s+"(?P<path>[^"]+)"\s*$')
SECTION = re.compile(r"-{1,}8<-{1,}\s+\[\s*(start|end)\s*:\s*([a-z][-_0-9a-z]*)\s*\]")
MARKER = re.compile(
    r"^\s*<!--\s*(?P<kind>skip|background|requires)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$"
)
PAGE_MARKER = re.compile(r"<!--\s*(?P<kind>port)\s*:\s*(?P<arg>.*?)\s*-->")
CODE = {"python", "sh", "console"}
NOT_CODE = {"text", "json"}


@dataclass
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # where its fence opens, 1-based
    lang: str
    title: str | None
    body: str  # with snippets expanded
    includes: list[str] = field(default_factory=list)  # files it includes
    fragments: bool = False  # only sections of included files: shown, run with the whole file
    skip: str | None = None  # the reason, for a block marked skip
    background: str | None = None  # the text to wait for, for a block marked background
    requires: str | None = None  # a module the block needs, for a block marked requires

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


@dataclass
class Page:
    """A page: its blocks, and what it says about itself."""

    path: Path
    blocks: list[Block]
    ports: list[int]


def expand(line: str, where: str) -> tuple[list[str], str | None]:
    """A line of a block with its snippet include expanded, and the file it includes."""
    m = SNIPPET.match(line)
    if m is None:
        return [line], None
    target, _, section = m["path"].partition(":")
    path = REPO / target
    if not path.is_file():
        raise AssertionError(f"{where}: the included file {target} does not exist")
    lines = path.read_text().splitlines()
    if section:
        inside, found = [], False
        for text in lines:
            marker = SECTION.search(text)
            if marker and marker[2] == section:
                if marker[1] == "start":
                    found = True
                    continue
                break
            if found and marker is None:
                inside.append(text)
        if not found:
            raise AssertionError(f"{where}: no section {section!r} in {target}")
        lines = inside
    else:
        lines = [text for text in lines if SECTION.search(text) is None]
    indent = line[: len(line) - len(line.lstrip())]
    return [indent + text if text else text for text in lines], target


def _title(info: str) -> str | None:
    m = re.search(r'title="([^"]+)"', info)
    return m[1] if m else None


def read_page(path: Path) -> Page:
    """Every fenced block of the page at ``path``, in order."""
    text = path.read_text()
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        start = i
        body: list[str] = []
        includes: list[str] = []
        raw_lines: list[str] = []
        i += 1
        where = f"{path.relative_to(REPO)}:{start + 1}"
        while i < len(lines) and lines[i].strip() != fence:
            raw = lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip()
            raw_lines.append(raw)
            expanded, included = expand(raw, where)
            body += expanded
            if included:
                includes.append(included)
            i += 1
        i += 1
        block = Block(
            page=path,
            line=start + 1,
            lang=info.split()[0] if info else "",
            title=_title(info),
            body="\n".join(body) + "\n",
            includes=includes,
            fragments=bool(raw_lines)
            and all(
                (m := SNIPPET.match(r)) is not None and ":" in m["path"]
                for r in raw_lines
                if r.strip()
            ),
        )
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        if marker is not None:
            if marker["kind"] == "skip":
                block.skip = marker["arg"] or ""
            elif marker["kind"] == "requires":
                block.requires = marker["arg"] or ""
            else:
                block.background = marker["arg"] or ""
        blocks.append(block)
    ports = [int(m["arg"]) for m in PAGE_MARKER.finditer(text) if m["kind"] == "port"]
    return Page(path=path, blocks=blocks, ports=ports)


def run_pages() -> list[Path]:
    """The pages whose blocks are run: the tutorial's and the how-to guides' (integrations' too)."""
    return sorted(p for d in RUN_PAGES for p in (DOCS / d).glob("*.md"))


def all_pages() -> list[Path]:
    """Every hand-written page of the site."""
    return sorted(DOCS.rglob("*.md"))


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """The commands of a ``console`` block, each with the lines it is shown to print."""
    out: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise AssertionError(f"a console block must start with a command: {line!r}")
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + "\n" + lines[i]
        i += 1
        expected: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append((command, expected))
    return out


def output_matches(expected: list[str], actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows: ``...`` alone is any lines (none too),
    ``...`` inside a line is any text; trailing spaces do not count."""
    pattern = ""
    for line in expected:
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            parts = [re.escape(p) for p in line.rstrip().split("...")]
            pattern += "[^\\n]*?".join(parts) + r"[ \t]*\n"
    text = "".join(line.rstrip() + "\n" for line in actual.splitlines())
    return re.fullmatch(pattern, text) is not None
