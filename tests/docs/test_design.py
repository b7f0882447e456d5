"""Every invariant the code cites is on the design page, under the number it cites.

The code cites the design's invariants by number ("docs/design.md invariant 9"); the page
gives each its anchor (``#invariant-9``), numbered 1 to 13 as the design numbers them.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs._pages import DOCS, REPO

DESIGN = DOCS / "design.md"
CITATION = re.compile(r"\binvariants?\s+(\d+(?:\s*(?:,|and|&)\s*\d+)*)", re.IGNORECASE)
HEADING = re.compile(r"^### (\d+)\. .+ \{#invariant-(\d+)\}$", re.MULTILINE)


def _anchors() -> list[int]:
    found = [(int(a), int(b)) for a, b in HEADING.findall(DESIGN.read_text())]
    assert all(a == b for a, b in found), f"a heading's number is not its anchor's: {found}"
    return [a for a, _ in found]


def _citations() -> dict[Path, set[int]]:
    out: dict[Path, set[int]] = {}
    for path in sorted((REPO / "src").rglob("*.py")):
        for match in CITATION.finditer(path.read_text()):
            numbers = {int(n) for n in re.findall(r"\d+", match[1])}
            out.setdefault(path, set()).update(numbers)
    return out


def test_the_design_page_numbers_its_invariants_1_to_13() -> None:
    assert _anchors() == list(range(1, 14))


def test_every_invariant_the_code_cites_is_on_the_design_page() -> None:
    cited = _citations()
    assert cited, "no citation found: the pattern no longer matches the code's"
    anchors = set(_anchors())
    for path, numbers in cited.items():
        assert numbers <= anchors, f"{path.relative_to(REPO)} cites {sorted(numbers - anchors)}"


def test_every_citation_names_the_design_page() -> None:
    """A reader of the code must be able to find what it cites: the file names the page."""
    for path in _citations():
        text = path.read_text()
        assert "docs/design.md" in text, f"{path.relative_to(REPO)} cites invariants of no page"
        assert "DESIGN invariant" not in text, f"{path.relative_to(REPO)}: say docs/design.md"


def test_the_pages_link_to_invariants_that_exist() -> None:
    anchors = set(_anchors())
    for page in sorted(DOCS.rglob("*.md")):
        for n in re.findall(r"design\.md#invariant-(\d+)", page.read_text()):
            assert int(n) in anchors, f"{page.relative_to(REPO)} links to invariant {n}"
