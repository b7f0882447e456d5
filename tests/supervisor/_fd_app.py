"""The application of ``test_descriptors``'s worker: ``_burst_child``'s model and tools."""

from __future__ import annotations

from tether.supervisor import WorkerApp

from ._burst_child import app as _app


def app() -> WorkerApp:
    model, tools = _app()
    return WorkerApp(model=model, tools=tools)
