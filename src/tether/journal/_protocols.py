"""What the runtime needs from the storage behind runs: the interfaces, apart from the stores.

``JournalHandle`` is an open run held for writing (``FileJournal``, ``PgJournal``). A store is
three things, each a protocol of its own so that code needing one asks for no more:

- ``RunStore``: runs themselves (create, open, read, list, the version of each), and the store
  as a resource to enter and leave;
- ``Inbox``: answers queued for a run another process holds;
- ``Blobs``: large payloads a journal refers to.

``Store`` is all three, what the supervisor takes; ``FileStore`` and ``PostgresStore`` are
``Store``\\ s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self

from ._records import AnyEvent, BlobRef, Event


class JournalHandle(Protocol):
    """An open run, held for writing by one worker: what the runtime appends through.

    ``FileJournal`` (a file) and the Postgres store's ``PgJournal`` implement it.
    """

    @property
    def run_id(self) -> str: ...

    @property
    def path(self) -> str:
        """Where the run lives (a file path, or the database and run), for messages."""
        ...

    @property
    def events(self) -> Sequence[AnyEvent]:
        """Every durable event, oldest first: a read-only view that grows with each append."""
        ...

    @property
    def next_seq(self) -> int: ...

    @property
    def broken(self) -> bool: ...

    async def append(self, events: Iterable[Event], *, at: float | None = None) -> list[AnyEvent]:
        """Append ``events`` as one group; each event without an ``at`` is dated ``at`` (the
        appender's clock: a supervisor's, which may be virtual), else now."""
        ...

    async def fence(self) -> None:
        """Raise ``LeaseLostError`` if this handle may no longer act for the run.

        Called before a tool runs, so a worker that was paused past its lease performs no side
        effect after another worker took the run over.
        """
        ...

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` as soon as this handle may no longer act for the run (PostgreSQL:
        another worker took it, or the lease ran out unrenewed), at once if it may not now:
        the runtime stops the run's calls in flight then, and records nothing more for it."""
        ...

    @property
    def lapsed(self) -> bool:
        """Whether this holder itself held the run before and lost it without letting it go
        (its lease ran out: the process was paused, starved or cut off from the store)."""
        ...

    @property
    def taken_from(self) -> str:
        """The holder whose expired lease this handle took over, in words (``""``: none)."""
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@dataclass(frozen=True, slots=True)
class RunStat:
    """What a sweep needs to know of a run without reading it.

    ``version`` changes whenever the run is written to; ``inbox`` says answers wait for it.
    """

    version: tuple[int, int]
    inbox: bool = False


class RunStore(Protocol):
    """Runs: create and open them for writing, read, list and watch them.

    The store is entered by each of its users (the ``Supervisor`` enters the one it is given):
    entering one that is open counts one more holder, the last holder to leave closes it, and
    entering it after that opens it again (see ``journal._shared``).
    """

    @property
    def entered(self) -> bool: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    def location(self, run_id: str) -> str:
        """Where run ``run_id`` lives, for messages."""
        ...

    async def create(self, run_id: str, events: Iterable[Event] = ()) -> JournalHandle: ...

    async def open(self, run_id: str) -> JournalHandle: ...

    async def read(self, run_id: str) -> list[AnyEvent]: ...

    async def list_runs(self) -> list[str]: ...

    async def run_stats(self) -> dict[str, RunStat]:
        """Runs a sweep should look at (every run this store could hold) and their versions."""
        ...

    async def exists(self, run_id: str) -> bool: ...

    async def changed(self) -> None:
        """Return when another process may have written to a run (never, if it cannot tell)."""
        ...


class Inbox(Protocol):
    """Answers (decisions, resolutions, signals) queued for runs another process holds."""

    async def has_inbox(self, run_id: str) -> bool: ...

    async def post(self, run_id: str, event: Event) -> None: ...

    async def post_checked(
        self,
        run_id: str,
        choose: Callable[[list[AnyEvent], list[AnyEvent]], Event | None],
    ) -> Event | None:
        """Queue the event ``choose`` picks, given the run's journal (its durable events) and
        the answers queued for it, with nothing else queued for the run between what it saw
        and the post (two answers to one call given at once are judged one against the
        other). ``choose`` refuses by raising or gives ``None`` to queue nothing; returns what
        was queued."""
        ...

    async def append_unless_queued(
        self, journal: JournalHandle, events: Sequence[Event], *, at: float | None = None
    ) -> list[AnyEvent] | None:
        """Append ``events`` to ``journal`` (this store's, held), as ``JournalHandle.append``
        does, under the lock ``post_checked`` takes of the run's inbox, unless answers wait
        there (``None``: nothing appended). An answer checked against the journal and
        appended so is judged with any answer queued at the same moment, from any process:
        a ``post_checked`` that comes meanwhile waits, and then reads the journal with it.

        Raises:
            JournalIOError: another answer kept the run's inbox too long (nothing appended).
            whatever ``JournalHandle.append`` raises.
        """
        ...

    async def take_inbox(self, run_id: str) -> list[AnyEvent]:
        """The answers waiting, oldest first, for the holder to record (then ``clear_inbox``)."""
        ...

    async def peek_inbox(self, run_id: str) -> list[AnyEvent]:
        """The answers waiting, oldest first, for anyone else to look at (nothing is taken)."""
        ...

    async def inbox_versions(self, run_ids: Collection[str]) -> dict[str, Hashable]:
        """Of ``run_ids``, those with answers waiting, each with a version that changes when
        its inbox does; asked about the runs a process is advancing, twice a second."""
        ...

    async def clear_inbox(self, run_id: str, count: int) -> None: ...


class Blobs(Protocol):
    """Large tool results, kept beside the journals and referred to by ``BlobRef``."""

    async def load_blob(self, ref: BlobRef) -> Any: ...


class Store(RunStore, Inbox, Blobs, Protocol):
    """What the runtime needs from the storage behind runs (``FileStore``, ``PostgresStore``)."""
