"""The systems tether is compared with in the supervisor bench, one module each.

Each runs ``_agent``'s scripted agent for ``res.runs`` runs at once and fills the
``CaseResult``. ``PEERS`` maps a case kind to its entry point and to the packages it needs;
LangGraph and DBOS are not tether dependencies, so their modules import them only when their
case runs, and a case whose package is missing is recorded as skipped (``missing``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _scale_result import CaseResult

from . import _dbos, _langgraph, _sqlite


@dataclass(frozen=True)
class Peer:
    """How to run one peer system's case, and the modules it imports."""

    run: Callable[[CaseResult, Path], None]
    needs: tuple[str, ...] = ()


PEERS: dict[str, Peer] = {
    "sqlite": Peer(_sqlite.run),
    "langgraph": Peer(_langgraph.run, _langgraph.NEEDS),
    "dbos": Peer(_dbos.run, _dbos.NEEDS),
}

INSTALL = "pip install langgraph langgraph-checkpoint-sqlite aiosqlite dbos"
"""What installs every optional peer."""


def missing(kind: str) -> str | None:
    """Why ``kind``'s case cannot run here (a module it needs is not installed), or ``None``."""
    peer = PEERS.get(kind)
    for name in peer.needs if peer is not None else ():
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"not installed ({exc})"
    return None
