"""A worker application whose factory raises, as one does when its configuration is missing."""

from __future__ import annotations

from tether.supervisor import WorkerApp


def app() -> WorkerApp:
    raise RuntimeError("no model key")
