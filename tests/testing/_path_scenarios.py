"""A scenario whose path differs between the baseline and the cases, as a timing race can make
it: the baseline's run sleeps once (and parks), a case's run never does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.models import Message, Model, ScriptedModel
from tether.testing import Scenario
from tether.tools import ToolRegistry


def _script(messages: list[Message]) -> Any:
    if not any(m.get("role") == "assistant" for m in messages):
        return [ScriptedModel.tool_use("toolu_01", "check", {"order": "o-1"})]
    return "checked"


def parks_only_in_the_baseline(root: Path) -> Scenario:
    baseline = root.parent.name == "baseline"

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="rerun")
        async def check(order: str) -> Any:
            """Check an order."""
            if baseline:
                return tether.sleep_for(0.05, result={"order": order})
            return {"order": order}

        return ScriptedModel(_script), tools

    return Scenario(run_id="run-check", prompt="check o-1", build=build, ledger=list)
