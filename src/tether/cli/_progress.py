"""Progress of a command that runs many cases: a live line on a terminal, plain lines elsewhere.

On a terminal the line shows the current case, a bar, cases done of all and the time so far,
and disappears when the command ends (its report follows). Anywhere else (a pipe, a log, a CI
job) each finished case gets one plain line, ``  [done/total] label``, so the record keeps
every case and nothing depends on redrawing.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class CaseProgress:
    """Shows cases as they start and finish on ``stream``; a context manager.

    ``started`` and ``finished`` take ``(done, total, label)``, the shape of the ``on_case``
    callbacks of ``run_crashtest`` and ``tether.bench.run``. ``first`` is what the live line
    says before the first call; with ``enabled=False`` nothing is ever shown (``--json``).
    """

    def __init__(self, stream: TextIO, *, first: str = "starting", enabled: bool = True) -> None:
        self._stream = stream
        self._first = first
        self._enabled = enabled
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CaseProgress:
        if self._enabled and self._stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=self._stream),
                transient=True,
                # Redrawing takes the GIL from whatever is being measured: twice a second
                # keeps the elapsed time current at a fraction of rich's default cost.
                refresh_per_second=2,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self._first, total=None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None

    def started(self, done: int, total: int, label: str) -> None:
        """A case starts: on a terminal it becomes the current one; elsewhere nothing shows."""
        self._show(done, total, label)

    def finished(self, done: int, total: int, label: str) -> None:
        """A case has finished (``done`` counts it): one line off a terminal."""
        if self._bar is None and self._enabled:
            print(f"  [{done}/{total}] {label}", file=self._stream, flush=True)
        self._show(done, total, label)

    def _show(self, done: int, total: int, label: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total, description=label)
