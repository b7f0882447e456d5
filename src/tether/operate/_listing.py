"""Every run's summary, kept between looks and read again only when the run changed: what the
console shows and ``tether runs`` prints.

A store of 10,000 runs cannot be folded on every page view. ``Listing`` keeps each run's
summary with the run's *version* (``tether.operate._holders.versions``: a journal's
``(size, mtime_ns)``, a PostgreSQL run's ``(next_seq, epoch)``) and who held it, and reads a
run again only when one of those changed, when its status changes by itself (an approval
deadline, a timer: the summary's ``changes_at``), or when its version cannot be trusted yet.

Why "trusted yet": a file's mtime comes from a coarse kernel clock, and preallocated journals
do not grow on every append, so two appends within one clock tick leave the same version. A
summary read in the same tick as the journal's last write may have missed the second one (git
calls such an index entry "racily clean"). A journal whose mtime is within ``RACY_NS`` of the
moment it was read is read again at the next look, until a look comes after that window.

A directory store's finished runs are also kept on disk (``_summary_file``), so that a new
process (a ``tether runs``, a console started again) reads only the journals that changed
since any listing last looked: at its first look a listing takes what the file keeps, for each run
whose journal is exactly the one it was made from, and it writes the file again when it has
learned of runs finished since.

When nothing changed since the last look (every run's version the same, nothing due to
change by itself, nothing untrusted), the last look's list is given again as it is.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from .._errors import InvalidRunIdError, JournalError, RunNotFoundError
from ..journal import AnyEvent, FileStore, Store
from . import _summary_file as summary_file
from ._holders import Version, look
from ._summary import NOT_A_JOURNAL, RunSummary, by_status, summarize, unreadable
from ._summary_file import Identity

log = logging.getLogger("tether.operate")

RACY_NS = 50_000_000  # well past a kernel tick (4 ms at HZ=250, 10 ms at HZ=100)
READERS = 8  # journals read at once on a refresh


@dataclass(frozen=True, slots=True)
class _Kept:
    version: Version
    summary: RunSummary
    trusted: bool  # the version was older than the read by more than RACY_NS
    identity: Identity | None = None  # of a finished run's journal: it may be kept on disk


class Listing:
    """The summaries of a store's runs, refreshed incrementally.

    Args:
        store: the store (a ``FileStore`` need not be entered: reading takes no lock).
        clock: wall-clock seconds, for statuses that change with time and for how old a
            journal's last write is (a write within ``RACY_NS`` of a read is read again).
        fresh_for: a look younger than this many seconds is reused as it is, so that many
            requests at once cost one look.
    """

    def __init__(
        self, store: Store, *, clock: Callable[[], float] = time.time, fresh_for: float = 0.25
    ) -> None:
        self.store = store
        self.clock = clock
        self.fresh_for = fresh_for
        self._kept: dict[str, _Kept] = {}
        self._lock = anyio.Lock()
        self._looked_at: float | None = None
        self._summaries: list[RunSummary] = []
        self._versions: dict[str, Version] = {}
        self._settled_until: float | None = None  # the last look holds until then, if unchanged
        self._disk: dict[str, tuple[Identity, RunSummary]] | None = None  # what the file kept
        self._groups: tuple[list[RunSummary], dict[str, list[RunSummary]]] | None = None
        self.reads = 0
        """Journals read so far (a measure of how well the cache works)."""
        self.keeps_on_disk = isinstance(store, FileStore)
        """Whether finished runs are kept on disk (a directory store), for other processes."""

    async def versions(self) -> dict[str, Version]:
        """Every run's version and holder, as of the last look (taken now if stale)."""
        await self.summaries()
        return self._versions

    async def summaries(self) -> list[RunSummary]:
        """Every run's summary, the most recently active first.

        Raises:
            OSError: the store's directory cannot be listed; a database error: it cannot be
                reached.
        """
        async with self._lock:
            now = time.monotonic()
            if self._looked_at is not None and now - self._looked_at < self.fresh_for:
                return self._summaries
            await self._refresh()
            self._looked_at = time.monotonic()
            return self._summaries

    def by_status(self, summaries: list[RunSummary]) -> dict[str, list[RunSummary]]:
        """``summaries`` by status (``_summary.by_status``), kept with the list they were made
        from: a look that finds nothing changed gives the same list again, whose groups then
        cost nothing (a page's counts and its status filter, over 10,000 runs)."""
        if self._groups is None or self._groups[0] is not summaries:
            self._groups = (summaries, by_status(summaries))
        return self._groups[1]

    async def _refresh(self) -> None:
        found, odd, inodes = await look(self.store, self._versions)
        now = self.clock()
        settled = self._settled_until
        if found == self._versions and settled is not None and now < settled:
            return  # nothing changed, nothing is due to: the last look stands
        stale = [
            run_id for run_id, version in found.items() if not self._fits(run_id, version, now)
        ]
        if stale and self.keeps_on_disk:
            stale = await self._from_disk(stale, found, inodes)
        read_at_ns = int(self.clock() * 1e9)  # mtimes are wall-clock times too
        identities = _identities(stale, found, inodes)  # before the read: never newer than it
        read = await self._read(stale)
        queued = await self._queued([r for r in stale if found[r].inbox is not None])
        for run_id in stale:
            events = read.get(run_id)
            if events is None:
                continue  # removed since it was listed
            version = found[run_id]
            identity = identities.get(run_id)
            if isinstance(events, Exception):
                summary = unreadable(run_id, str(events))
            else:
                summary = summarize(
                    run_id, events, version.held_by, now=now, queued=queued.get(run_id)
                )
                if summary.finished:  # a finished run's state is not needed again
                    summary = dataclasses.replace(summary, state=None)
            trusted = (
                not isinstance(self.store, FileStore) or version.version[1] < read_at_ns - RACY_NS
            ) and (version.inbox is None or run_id in queued)
            keep = identity if trusted and summary.finished and summary.readable else None
            if keep is not None and (keep.ctime_ns >= read_at_ns - RACY_NS or keep.coarse):
                keep = None
            self._kept[run_id] = _Kept(version, summary, trusted, keep)
        for run_id in set(self._kept) - set(found):
            del self._kept[run_id]
        out = [kept.summary for run_id, kept in self._kept.items() if run_id in found]
        if isinstance(self.store, FileStore):
            for name, kind in odd.items():
                if name.endswith(".journal"):
                    path = os.path.join(self.store.runs_dir, name)
                    out.append(
                        unreadable(
                            name.removesuffix(".journal"),
                            f"{path} is {kind}, not a regular file",
                            action=NOT_A_JOURNAL,
                        )
                    )
        out.sort(key=lambda s: (-(s.last_at or 0.0), s.run_id))
        self._summaries = out
        self._versions = found
        self._settled_until = self._settles(out)
        if self.keeps_on_disk:
            await self._to_disk()

    def _settles(self, out: list[RunSummary]) -> float | None:
        """Until when the look just taken stands while no version changes (``None``: the next
        look must read again, a run's version not being trusted yet)."""
        until = float("inf")
        for kept in self._kept.values():
            if not kept.trusted:
                return None
            changes_at = kept.summary.changes_at
            if changes_at is not None and changes_at < until:
                until = changes_at
        return until

    async def _from_disk(
        self, stale: list[str], found: dict[str, Version], inodes: dict[str, tuple[int, int]]
    ) -> list[str]:
        """Take from the file what it keeps of ``stale`` runs whose journals are exactly those
        it was made from (as the look just taken saw them); the runs still to read."""
        assert isinstance(self.store, FileStore)
        if self._disk is None:
            root = self.store.root
            self._disk = await anyio.to_thread.run_sync(summary_file.load, root)
        disk = self._disk
        candidates = [
            run_id
            for run_id in stale
            if run_id in disk
            and (disk[run_id][0].size, disk[run_id][0].mtime_ns) == found[run_id].version
        ]
        if not candidates:
            return stale
        now_ids = _identities(candidates, found, inodes)
        taken = set()
        for run_id in candidates:
            identity, summary = disk[run_id]
            if now_ids.get(run_id) != identity:
                continue  # the journal changed: read it
            version = found[run_id]
            if summary.held_by != version.held_by:
                summary = dataclasses.replace(summary, held_by=version.held_by)
            self._kept[run_id] = _Kept(version, summary, True, identity)
            taken.add(run_id)
        return [run_id for run_id in stale if run_id not in taken]

    async def _to_disk(self) -> None:
        """Write the file again if it no longer keeps exactly the finished runs known now."""
        assert isinstance(self.store, FileStore)
        keep = {
            run_id: (kept.identity, kept.summary)
            for run_id, kept in self._kept.items()
            if kept.identity is not None
        }
        disk = self._disk or {}
        if keep.keys() == disk.keys() and all(disk[r][0] == keep[r][0] for r in keep):
            return
        root = self.store.root
        if await anyio.to_thread.run_sync(summary_file.save, root, keep):
            self._disk = keep

    def _fits(self, run_id: str, version: Version, now: float) -> bool:
        kept = self._kept.get(run_id)
        if kept is None or not kept.trusted or kept.version != version:
            return False
        changes_at = kept.summary.changes_at
        return changes_at is None or now < changes_at

    async def _read(self, run_ids: list[str]) -> dict[str, list[AnyEvent] | Exception]:
        """The events of each run (or the error that kept it from being read); a run that is
        gone is left out."""
        self.reads += len(run_ids)
        if not run_ids:
            return {}
        if not isinstance(self.store, FileStore):
            from ..postgres import PostgresStore

            if isinstance(self.store, PostgresStore):
                return dict(await self.store.read_many(run_ids))
        out: dict[str, list[AnyEvent] | Exception] = {}
        limiter = anyio.CapacityLimiter(READERS)

        async def read_one(run_id: str) -> None:
            async with limiter:
                try:
                    out[run_id] = await self.store.read(run_id)
                except RunNotFoundError:
                    pass
                except (JournalError, InvalidRunIdError) as exc:
                    out[run_id] = exc

        async with anyio.create_task_group() as tg:
            for run_id in run_ids:
                tg.start_soon(read_one, run_id)
        return out

    async def _queued(self, run_ids: list[str]) -> dict[str, list[AnyEvent]]:
        """The answers waiting in the inbox of each of ``run_ids`` (few: a run's inbox is
        cleared at its holder's next pause); one that cannot be read is left out, and is
        read again at the next look."""
        out: dict[str, list[AnyEvent]] = {}
        for run_id in run_ids:
            try:
                out[run_id] = await self.store.peek_inbox(run_id)
            except (JournalError, InvalidRunIdError, OSError) as exc:
                log.warning("run %s: its inbox cannot be read: %s", run_id, exc)
        return out

    def forget(self, run_id: str) -> None:
        """Read ``run_id`` again at the next look (after this console wrote to it)."""
        self._kept.pop(run_id, None)
        self._looked_at = None
        self._settled_until = None


def _identities(
    run_ids: list[str], found: dict[str, Version], inodes: dict[str, tuple[int, int]]
) -> dict[str, Identity]:
    """The identities of the journals of ``run_ids`` as the look saw them: its ``stat`` of
    each gave the size and time (the version) and the inode and ctime, so none is made again
    (a directory store's; another store's runs have none)."""
    out: dict[str, Identity] = {}
    for run_id in run_ids:
        inode = inodes.get(run_id)
        if inode is not None:
            size, mtime_ns = found[run_id].version
            out[run_id] = Identity(size, mtime_ns, inode[0], inode[1])
    return out
