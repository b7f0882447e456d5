"""Scenario factories that are themselves broken: crashtest must say so (exit 2), not call the
agent unsafe (exit 1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

import tether
from tether.testing import Scenario


def _build() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    return tether.ScriptedModel(["done"]), tether.ToolRegistry()


def raises(root: Path) -> Scenario:
    raise RuntimeError("cannot reach the fake service")


def takes_nothing() -> Scenario:
    return Scenario(build=_build, prompt="hi", ledger=list)


def returns_none(root: Path) -> Any:
    return None


def ledger_is_a_list(root: Path) -> Scenario:
    return Scenario(build=_build, prompt="hi", ledger=["email to dana"])  # type: ignore[arg-type]


def build_raises(root: Path) -> Scenario:
    def build() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
        raise ImportError("no module named 'helpdesk'")

    return Scenario(build=build, prompt="hi", ledger=list)


def fine(root: Path) -> Scenario:
    return Scenario(build=_build, prompt="hi", ledger=list)


def hangs(root: Path) -> Scenario:
    """An agent whose one tool never returns: the baseline's process runs until it is killed
    (``started`` says it is inside the tool)."""

    def build() -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
        tools = tether.ToolRegistry()

        @tools.tool(policy="rerun")
        async def wait_forever() -> str:
            """Wait."""
            (root / "started").write_text(str(os.getpid()))
            await anyio.sleep_forever()
            return "never"

        use = tether.ScriptedModel.tool_use
        return tether.ScriptedModel([[use("toolu_w", "wait_forever", {})], "done"]), tools

    return Scenario(build=build, prompt="hi", ledger=list)
