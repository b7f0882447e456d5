"""What both integrations' streaming tests say of a run and of a stream cut short."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tether
from tether.journal import ModelFailed, ModelResponse
from tether.supervisor import Supervisor
from tether.testing import VirtualClock

from ..supervisor._helpers import of_type, read_events

RUN = "run-stream"
PROMPT = "How much was order A-1?"
SAID = "Looking order A-1 up — one moment."
FINAL = "Order A-1 came to 30.0 EUR."


async def check_asked_again(root: Path, seen: list[str]) -> None:
    """Run ``RUN``'s first stream was cut short: nothing of it was journaled, the failure was
    transient, and the whole answer asked again is the one journaled; the watcher saw the text
    as it came, the whole answer's last."""
    events = await read_events(root, RUN)
    (failed,) = of_type(events, ModelFailed)
    assert failed.kind == "transient"
    (saved,) = of_type(events, ModelResponse)
    assert saved.seq > failed.seq
    assert saved.message["content"][0]["text"] == SAID
    assert saved.message["content"][1]["input"] == {"order": "A-1"}
    assert "".join(seen).endswith(SAID)


def watched(root: Path, app: Any, seen: list[str]) -> Supervisor:
    """A supervisor of ``app``'s runs (a ``TetherAgent``, a ``TetherRunner``) on files under
    ``root``, its text watcher appending what it sees to ``seen``."""
    return Supervisor(
        tether.FileStore(root),
        model=app.model,
        tools=app.tools,
        on_text=lambda run_id, text: seen.append(text),
        sweep_interval=None,
        clock=VirtualClock(autojump_threshold=0),
    )
