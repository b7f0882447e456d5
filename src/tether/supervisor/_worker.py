"""Running a supervisor as a long-lived worker process (what ``tether worker`` does)."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._store_url import store_for
from ..journal._protocols import Store
from ..models._base import Model
from ..tools._registry import ToolRegistry
from ._supervisor import Supervisor

log = logging.getLogger("tether.supervisor")


@dataclass
class WorkerApp:
    """What a worker needs from the application: its model, its tools, supervisor options.

    Args:
        model: the model runs pin and use.
        tools: the tools runs pin and use.
        options: more keyword arguments for ``Supervisor`` (``max_active_runs``,
            ``model_concurrency``, ``app_version``, ``sweep_interval``, ...).
    """

    model: Model
    tools: ToolRegistry
    options: dict[str, Any] = field(default_factory=dict)


def load_app(target: str) -> WorkerApp:
    """Import ``MODULE:FACTORY`` and call the factory; it returns a ``WorkerApp``.

    The current directory is importable, as with ``python -m``.

    Raises:
        ValueError: ``target`` is not ``MODULE:FACTORY``, or the factory returns something else.
        ImportError, AttributeError: the module or the factory does not exist.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FACTORY, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    factory = getattr(importlib.import_module(module_name), attr)
    app = factory()
    if not isinstance(app, WorkerApp):
        raise ValueError(f"{target} returned {type(app).__name__}, not a tether WorkerApp")
    return app


async def run_worker(
    store: Store | str | os.PathLike[str], app: WorkerApp, *, ready: anyio.Event | None = None
) -> None:
    """Serve every run in ``store`` until SIGTERM or SIGINT, then drain and return.

    ``store`` is a store (entered here if it is not yet), or names one: a directory, or a
    ``postgresql://`` URL (schema ``tether``, default lease; build a ``PostgresStore`` for
    others).

    Unfinished runs are resumed on start; runs whose owner dies, and parked runs that get a
    decision from elsewhere, are picked up at each sweep. On the first signal the supervisor
    drains (``Supervisor.drain``): nothing new starts, model and tool calls already running
    finish and are recorded (up to the app's ``drain_timeout``, 30 s by default), and every
    run still active is recorded as suspended, which its next owner does not count against
    it. A second signal stops the drain at once (the runs are cancelled and recorded as
    suspended all the same).
    """
    if isinstance(store, (str, os.PathLike)):
        store = store_for(os.fspath(store))
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with Supervisor(store, model=app.model, tools=app.tools, **app.options) as sup:
            if ready is not None:
                ready.set()
            async for signum in signals:
                log.info("%s: draining (a second signal stops at once)", _name(signum))
                break
            async with anyio.create_task_group() as tg:

                async def _hurry() -> None:
                    async for again in signals:
                        log.warning("%s again: stopping at once", _name(again))
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(_hurry)
                await sup.drain()
                tg.cancel_scope.cancel()


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
