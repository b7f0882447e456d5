"""Running a supervisor as a long-lived worker process (what ``tether worker`` does)."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._errors import ToolUnavailableError
from .._store_url import store_for
from ..journal import Store
from ..models import Model
from ..tools import ToolRegistry
from ._failures import leaves
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


WORKER_GC_THRESHOLD = 10_000
"""The first generation's threshold of the cyclic garbage collector in a worker process
(CPython's default is 700): allocations less deallocations between two collections."""


def tune_collector() -> None:
    """Set the process's cyclic garbage collector for a long-lived worker: collect, move every
    object alive now (the modules, the application's) out of the collector's sight
    (``gc.freeze``), and raise the first generation's threshold to ``WORKER_GC_THRESHOLD``.

    Only for a process the worker owns (``tether worker`` calls it once its application is
    loaded): these are settings of the whole process, which a ``Supervisor`` embedded in an
    application never changes by itself. Each run's live state (its events and conversation)
    is what sets the collector off; at 700 it walked the runs in flight hundreds of times a
    second, a quarter of the event loop's CPU at 1,000 runs.
    """
    gc.collect()
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(WORKER_GC_THRESHOLD, second, third)


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


SOURCES_WAIT = 60.0
"""Seconds a starting worker waits for its tool sources (an MCP server not up yet) before it
gives up with the last reason."""


class SourcesUnavailableError(Exception):
    """The application's tool sources could not be opened within ``SOURCES_WAIT`` seconds."""


async def open_sources_waiting(stack: AsyncExitStack, tools: ToolRegistry, wait: float) -> None:
    """Open ``tools``' sources until ``stack`` closes, trying again with backoff (0.25 s
    doubling to 4 s) while one cannot be reached (``ToolUnavailableError``: an MCP server down
    or starting), logging each try, for up to ``wait`` seconds: a fleet restarted together with
    its MCP servers comes up once they answer. Anything else a source raises, at once.

    Raises:
        SourcesUnavailableError: still unreachable after ``wait`` seconds (its message says why).
    """
    deadline = time.monotonic() + wait
    delay = 0.25
    while True:
        try:
            await stack.enter_async_context(tools.open_sources())
            return
        except Exception as exc:
            down = [leaf for leaf in leaves(exc) if isinstance(leaf, ToolUnavailableError)]
            if not down:
                raise
            why = "; ".join(str(leaf) for leaf in down)
            left = deadline - time.monotonic()
            if left <= 0:
                raise SourcesUnavailableError(
                    f"the tool sources cannot be opened (still after waiting {wait:g} s): {why}"
                ) from exc
            pause = min(delay, left)
            log.warning(
                "waiting for the tool sources: %s; trying again in %.1f s (giving up %.0f s "
                "from now)",
                why,
                pause,
                left,
            )
            await anyio.sleep(pause)
            delay = min(delay * 2, 4.0)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""What stops a worker: the first drains, a second stops at once."""


@contextmanager
def exit_on_stop_signals() -> Iterator[None]:
    """A worker process's first act: within the block, until ``run_worker`` listens for them
    itself, SIGTERM or SIGINT ends the process with status 0 (``SystemExit(0)``, wherever it
    is); the handlers in place before are put back after the block.

    Nothing is entered before ``run_worker`` (the application is loaded, the store named), so
    there is nothing to release; without this, a signal in the process's first moments would
    kill it with the signal's default action.
    """
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _exit_before_serving)
    try:
        yield
    finally:
        _restore(before)


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        if handler is not None:  # (None: set from outside Python; left as it is)
            signal.signal(signum, handler)


def _exit_before_serving(signum: int, frame: object) -> None:
    log.info("%s during start-up: exiting before serving", _name(signum))
    raise SystemExit(0)


async def run_worker(
    store: Store | str | os.PathLike[str], app: WorkerApp, *, ready: anyio.Event | None = None
) -> None:
    """Serve every run in ``store`` until SIGTERM or SIGINT, then drain and return.

    ``store`` is a store (entered here), or names one: a directory, or a ``postgresql://``
    URL (schema ``tether``, default lease; build a ``PostgresStore`` for others).

    Unfinished runs are resumed on start; runs whose owner dies, and parked runs that get a
    decision from elsewhere, are picked up at each sweep. On the first signal the supervisor
    drains (``Supervisor.drain``): nothing new starts, model and tool calls already running
    finish and are recorded (up to the app's ``drain_timeout``, 30 s by default), and every
    run still active is recorded as suspended, which its next owner does not count against
    it. A second signal stops the drain at once (the runs are cancelled and recorded as
    suspended all the same).

    The signals are listened for from the first line. One that comes while the store is
    being opened (a database that cannot be reached yet is waited for) stops the wait, with
    nothing held, and this returns; one that comes while the supervisor starts (its first
    sweep resumes runs) drains it as soon as it has started. The handlers of SIGTERM and
    SIGINT in place before the call are in place again after it.

    The application's tool sources are opened first: one that cannot be reached yet (an MCP
    server starting) is waited for, with a log line at each try, for up to ``SOURCES_WAIT``
    seconds.

    Raises:
        SourcesUnavailableError: a tool source still unreachable after ``SOURCES_WAIT``.
        whatever entering the store or the supervisor raises (``StoreUnavailableError``,
        ``StoreSchemaError``, ...), or a tool source other than by being out of reach.
    """
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            if isinstance(store, (str, os.PathLike)):
                store = store_for(os.fspath(store))
            sup = Supervisor(store, model=app.model, tools=app.tools, **app.options)
            await _Serving(store, sup, app.tools, signals, ready).serve()
    finally:
        _restore(before)


class _Serving:
    """One worker's life between its first line and its return: opening the store,
    starting, serving, draining. What a signal does depends on which.

    While the tool sources and the store are being opened (an MCP server or a database that
    cannot be reached yet is waited for) nothing is held, so a signal cancels the wait. Once
    the store is open, the supervisor's entry may already have runs in flight (its first
    sweep resumes them): a signal then drains, as soon as the entry is done, as it does
    afterwards; cancelling them instead would cut their tool calls short, leaving calls for
    their policies to decide. A second signal cuts the drain short.
    """

    def __init__(
        self,
        store: Store,
        sup: Supervisor,
        tools: ToolRegistry,
        signals: AsyncIterator[int],
        ready: anyio.Event | None,
    ) -> None:
        self._store = store
        self._sup = sup
        self._tools = tools
        self._signals = signals
        self._ready = ready
        self._opening = anyio.CancelScope()
        self._draining = anyio.CancelScope()
        self._opened = False
        self._serving = False
        self._stop = anyio.Event()

    async def serve(self) -> None:
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._listen)
            try:
                with self._opening:
                    async with AsyncExitStack() as sources:  # (the supervisor's entry shares it)
                        await open_sources_waiting(sources, self._tools, SOURCES_WAIT)
                        await self._serve()
            except Exception as exc:  # raised as it is, not in the listener's task group
                failed = exc
            tg.cancel_scope.cancel()
        if failed is not None:
            raise failed

    async def _serve(self) -> None:
        async with self._store:  # (the supervisor enters it too, and leaves first)
            self._opened = True
            async with self._sup:
                self._serving = True
                if self._ready is not None:
                    self._ready.set()
                await self._stop.wait()
                with self._draining:
                    await self._sup.drain()

    async def _listen(self) -> None:
        async for signum in self._signals:
            name = _name(signum)
            if not self._opened:
                log.info("%s while opening the store: stopping before serving", name)
                self._opening.cancel()
            elif not self._stop.is_set():
                when = "" if self._serving else " during start-up (once started)"
                log.info("%s: draining%s (a second signal stops at once)", name, when)
                self._stop.set()
            else:
                log.warning("%s again: stopping at once", name)
                self._draining.cancel()
                return


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
