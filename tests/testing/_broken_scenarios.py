"""Scenario factories that are themselves broken: crashtest must say so (exit 2), not call the
agent unsafe (exit 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
