"""The support agent with a person's approval before each reply: ``python approval.py RUN_ID``.

``build`` is what ``tether worker --app approval:build`` loads.
"""

from __future__ import annotations

import sys

import anyio
from helpdesk import Helpdesk
from support import main, make_model, make_tools

from tether.supervisor import WorkerApp


def build() -> WorkerApp:
    """The application a worker runs: the model, the tools (approval on), more options."""
    tools = make_tools(Helpdesk("replies.jsonl"), approval=True)
    return WorkerApp(model=make_model(), tools=tools, options={"sweep_interval": 0.5})


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], make_tools(Helpdesk("replies.jsonl"), approval=True))
