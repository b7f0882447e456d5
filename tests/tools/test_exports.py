"""The public surface of ``tether.tools``."""

from __future__ import annotations

import tether.tools


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(tether.tools) if not name.startswith("_")}
    # Submodules show up as attributes once imported; they are private by their names.
    assert set(tether.tools.__all__) == public - {"annotations"}
    assert sorted(tether.tools.__all__) == [
        "ApprovalTimeout",
        "ContentBlocks",
        "ReplayPolicy",
        "ToolContext",
        "ToolRegistry",
        "ToolSource",
        "ToolSpec",
        "Wait",
        "sleep_for",
        "sleep_until",
        "start_child",
        "wait_for",
    ]


def test_every_exported_name_resolves() -> None:
    for name in tether.tools.__all__:
        assert getattr(tether.tools, name) is not None
