"""``PgJournal``: one run held through a lease, appended to with fenced statements.

Invariants kept here:

- ``append`` returns only after the database committed the group (one statement: the run's row
  is updated under its lock with the epoch check, and the events inserted; all or nothing).
- A stale epoch inserts nothing: ``LeaseLostError``, and this handle refuses every later append
  and ``fence``. The worker stops working on the run.
- A connection lost while a group was in flight makes its outcome unknown. The handle then
  reconnects and reads rows ``(run_id, seq)`` to learn it: present (and equal) means committed;
  absent means the statement never took effect, and it is sent again, still fenced. It is never
  re-run without looking. If the database stays unreachable the handle is broken
  (``JournalBrokenError``); reopening re-reads what the database holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, final

import anyio
import msgspec

from .._errors import (
    JournalBrokenError,
    JournalClosedError,
    JournalCorruptError,
    JournalIOError,
    LeaseLostError,
)
from ..journal import AnyEvent, Event, Retried, RunFinished
from ..journal._backend import EventsView, stamp_events
from ..journal._records import ANSWERS, FROM_OUTSIDE, decode_event

if TYPE_CHECKING:
    import asyncio

    from ._parts import StoreParts

log = logging.getLogger("tether.postgres")

_WAKES = (*ANSWERS, *FROM_OUTSIDE)
"""Records that, once the run is released, wake the other workers to look at it: a person's
answer, a signal, a repin, a child run's end (a parent asleep for it wakes at once)."""


def stamp(
    where: str, events: Iterable[Event], first_seq: int, at: float | None = None
) -> tuple[list[AnyEvent], list[bytes], str | None]:
    """``stamp_events``, and the run's new ``status`` column if the events change it: the final
    status when one ends the run, ``'active'`` when a ``retried`` record re-opens it."""
    stamped, payloads = stamp_events(events, first_seq, where, at)
    status: str | None = None
    for ev in stamped:
        if isinstance(ev, RunFinished):
            status = ev.status
        elif isinstance(ev, Retried):
            status = "active"
    return stamped, payloads, status


def decode_rows(where: str, rows: list[Any]) -> list[AnyEvent]:
    """The events of a run's ``(seq, payload)`` rows, checked to follow each other from 0.

    Raises:
        JournalCorruptError: a row is missing, does not decode, or holds another seq.
    """
    events: list[AnyEvent] = []
    for expected, (seq, payload) in enumerate(rows):
        if seq != expected:
            raise JournalCorruptError(
                where, seq, expected, f"rows skip from seq {expected} to {seq}"
            )
        try:
            event = decode_event(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise JournalCorruptError(where, seq, seq, f"payload does not decode: {exc}") from None
        if event.seq != seq:
            raise JournalCorruptError(where, seq, seq, f"row seq {seq} holds event seq {event.seq}")
        events.append(event)
    return events


@final
class PgJournal:
    """An open run of a ``PostgresStore``, held by this worker's lease (one epoch).

    Create or open one through the store. ``events`` holds every event of the run, in ``seq``
    order: those read when it was claimed and those appended since.
    """

    def __init__(self, store: StoreParts, run_id: str, epoch: int, events: list[AnyEvent]) -> None:
        self._store = store
        self._run_id = run_id
        self.epoch = epoch
        self._events = events
        self._view = EventsView(events)
        self._next_seq = len(events)
        import asyncio  # with the event loop, not with tether's import

        self._lock = asyncio.Lock()
        self._inflight: set[asyncio.Future[bool]] = set()
        self._lost: str | None = None
        self._on_lost: list[Callable[[], None]] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._broken: BaseException | None = None
        self._closed = False
        self.answered = False
        self.taken_from = ""
        self.lapsed = False
        self.valid_until = time.monotonic() + store.lease_ttl

    @property
    def valid_until(self) -> float:
        """Until when (``time.monotonic()``) this worker surely holds the lease: the start of
        the statement that last took or renewed it, plus the lease's length."""
        return self._valid_until

    @valid_until.setter
    def valid_until(self, when: float) -> None:
        # A timer at the end of the lease: a process paused past it (SIGSTOP, a frozen VM) or
        # cut off from the database learns it lost the run as soon as it runs again, before
        # the tool calls it had in flight get to go on (their own wake-ups come later).
        self._valid_until = when
        if self._expiry is not None:
            self._expiry.cancel()
        if not self._closed and self._lost is None:
            import asyncio  # with the event loop, not with tether's import

            self._expiry = asyncio.get_running_loop().call_at(when, self._ran_out)

    def _ran_out(self) -> None:
        self._expiry = None
        if self.active and time.monotonic() >= self._valid_until:
            self.mark_lost(
                "its lease ran out before it could be renewed (the process was paused, or cut "
                "off from the database)"
            )

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` as soon as this handle may no longer act for the run (another
        worker took it over, or the lease ran out before it was renewed); at once if so."""
        if self._lost is not None:
            callback()
        else:
            self._on_lost.append(callback)

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def path(self) -> str:
        return self._store.location(self._run_id)

    @property
    def events(self) -> EventsView:
        """Every committed event, oldest first: a read-only view that grows as appends land."""
        return self._view

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def broken(self) -> bool:
        return self._broken is not None

    @property
    def lost(self) -> bool:
        """Whether another worker took the run over (this handle's epoch is stale)."""
        return self._lost is not None

    @property
    def active(self) -> bool:
        return not (self._closed or self.lost or self.broken)

    async def __aenter__(self) -> PgJournal:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def mark_lost(self, detail: str) -> None:
        """This handle may no longer act for the run: say so, and tell ``when_lost``'s
        callbacks (which stop the calls still running for it)."""
        if self._lost is not None:
            return
        log.warning("run %s: lease lost (%s)", self._run_id, detail)
        self._lost = detail
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        callbacks, self._on_lost = self._on_lost, []
        for callback in callbacks:
            callback()

    def _check_writable(self) -> None:
        if self._closed:
            raise JournalClosedError(self.path)
        if self._lost is not None:
            raise LeaseLostError(self.path, self._lost)
        if self._broken is not None:
            raise JournalBrokenError(self.path, self._broken) from self._broken

    async def append(self, events: Iterable[Event], *, at: float | None = None) -> list[AnyEvent]:
        """Append ``events`` as one atomic group; return them stamped with ``seq`` and ``at``
        (an event's own, else ``at``, else now).

        Returns only when the group is committed. Concurrent appends are allowed: they are
        written one after another, in call order.

        Raises:
            LeaseLostError: another worker holds the run now; nothing was written.
            JournalBrokenError: the outcome could not be learnt (database unreachable), or an
                earlier append broke the handle.
            JournalClosedError: the handle is closed.
            RecordTooLargeError: an encoded event exceeds the frame limit.

        On cancellation: the call raises at once, but a group already sent is still settled
        (committed and added to ``events``, or the handle marked), and ``aclose`` waits for it.
        """
        written = await self._append(events, at, unless_queued=False)
        assert written is not None
        return written

    async def append_unless_queued(
        self, events: Iterable[Event], *, at: float | None = None
    ) -> list[AnyEvent] | None:
        """``append``, in one transaction with the lock of the run's inbox (the one a checked
        post takes), unless answers wait there: then ``None``, nothing written. The one
        group a person's answer writes: no other append of this handle may be under way.

        Raises:
            JournalIOError: another answer kept the run's inbox locked too long (nothing
                written; the handle is as it was).
            as ``append``.
        """
        if self._inflight:
            raise RuntimeError(f"{self.path}: an append is under way")
        return await self._append(events, at, unless_queued=True)

    async def _append(
        self, events: Iterable[Event], at: float | None, *, unless_queued: bool
    ) -> list[AnyEvent] | None:
        self._check_writable()
        prepared = [await self._store.prepare(ev) for ev in events]
        self._check_writable()
        if not prepared:
            return []
        stamped, payloads, finished = stamp(self.path, prepared, self._next_seq, at)
        self._next_seq += len(stamped)
        import asyncio  # with the event loop, not with tether's import

        task = asyncio.ensure_future(self._commit(stamped, payloads, finished, unless_queued))
        self._inflight.add(task)
        task.add_done_callback(_Settle(self._inflight))
        return stamped if await asyncio.shield(task) else None

    async def _commit(
        self,
        stamped: list[AnyEvent],
        payloads: list[bytes],
        finished: str | None,
        unless_queued: bool = False,
    ) -> bool:
        """Write the group; ``False`` (with ``unless_queued``) if it was not, answers waiting
        in the run's inbox (its numbers are given back)."""
        async with self._lock:  # one group at a time per run, in call order
            if self._lost is not None:
                raise LeaseLostError(self.path, self._lost)
            if self._broken is not None:
                raise JournalBrokenError(self.path, self._broken) from self._broken
            first = stamped[0].seq
            try:
                landed = await self._store.append_rows(
                    self, first, payloads, finished, unless_queued=unless_queued
                )
            except JournalIOError:  # the inbox's lock was never had: nothing was sent
                self._next_seq = first
                raise
            except Exception as exc:
                self._broken = exc
                raise JournalBrokenError(self.path, exc) from exc
            if landed is None:
                self._next_seq = first
                return False
            if not landed:
                detail = await self._store.why_rejected(self)
                self.mark_lost(detail)
                raise LeaseLostError(self.path, detail)
            self._events.extend(stamped)
            if any(isinstance(ev, _WAKES) for ev in stamped):
                self.answered = True  # written from outside: the workers should look at the run
            return True

    async def fence(self) -> None:
        """Raise ``LeaseLostError`` unless this worker still holds the run.

        Free while the lease was renewed recently; otherwise (after a long pause, say) it asks
        the database before returning.
        """
        self._check_writable()
        if time.monotonic() < self.valid_until - self._store.lease_ttl / 2:
            return
        await self._store.renew([self])
        self._check_writable()

    async def aclose(self) -> None:
        """Wait for appends in flight, then release the lease. Idempotent.

        On cancellation: shielded; completes first.
        """
        if self._closed:
            return
        self._closed = True
        self._on_lost = []
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        with anyio.CancelScope(shield=True):
            if self._inflight:
                import asyncio  # with the event loop, not with tether's import

                await asyncio.wait(list(self._inflight))
            await self._store.release(self)


class _Settle:
    """Done-callback of an append: forget it, and mark its exception as seen.

    The caller may have been cancelled and never look at the outcome; the handle already
    recorded it (``lost`` / ``broken``).
    """

    __slots__ = ("inflight",)

    def __init__(self, inflight: set[asyncio.Future[bool]]) -> None:
        self.inflight = inflight

    def __call__(self, fut: asyncio.Future[bool]) -> None:
        self.inflight.discard(fut)
        if not fut.cancelled():
            fut.exception()
