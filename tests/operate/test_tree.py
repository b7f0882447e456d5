"""``as_tree``: the order ``tether runs`` lists runs in, each child run under its parent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.operate import RunSummary, as_tree


def _runs(parents: dict[str, str | None]) -> list[RunSummary]:
    return [RunSummary(run_id=r, status="done", parent=p) for r, p in parents.items()]


def test_children_follow_their_parent_indented() -> None:
    runs = _runs(
        {
            "a": None,
            "a.c1": "a",
            "b": None,
            "b.c1": "b",
            "b.c1.g": "b.c1",
            "orphan.c": "gone",  # its parent was removed: a top-level run
            "z.c": "a",  # a child listed far from its parent
        }
    )
    got = [(depth, s.run_id) for depth, s in as_tree(runs)]
    assert got == [
        (0, "a"),
        (1, "a.c1"),
        (1, "z.c"),
        (0, "b"),
        (1, "b.c1"),
        (2, "b.c1.g"),
        (0, "orphan.c"),
    ]


def test_parents_that_name_each_other_are_listed_flat() -> None:
    runs = _runs({"x": "y", "y": "x", "top": None})
    assert [(d, s.run_id) for d, s in as_tree(runs)] == [(0, "top"), (0, "x"), (0, "y")]


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.text("abc", max_size=3)))
def test_every_run_is_listed_once_under_its_parent(links: dict[str, str]) -> None:
    runs = _runs({r: (p or None) for r, p in links.items()})
    tree = as_tree(runs)
    assert sorted(s.run_id for _, s in tree) == sorted(links)
    position = {s.run_id: i for i, (_, s) in enumerate(tree)}
    for i, (depth, s) in enumerate(tree):
        if depth > 0:
            assert s.parent is not None
            assert position[s.parent] < i
            assert tree[position[s.parent]][0] == depth - 1
