"""Who holds a run right now, and what every run's version is, without reading journals.

A directory store: the process holding a journal's ``flock`` (``/proc/locks``, which takes no
lock itself). PostgreSQL: the worker whose lease is live by the database's clock. ``versions``
gives every run's version (which changes whenever the run is written to) and holder in one
look, so that a listing reads only the journals that changed since it last looked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Hashable
from typing import NamedTuple

import anyio

from ..journal import FileStore, RunStore
from ..journal._layout import journal_path


def held_by(path: str) -> int | None:
    """The pid holding ``path``'s ``flock`` (0 if unknown), or ``None`` if nobody holds it.

    Reads ``/proc/locks`` where it exists, which takes no lock itself; elsewhere it tries a
    shared, non-blocking ``flock`` for an instant.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return _probe(path)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 27956 fe:00:2146324 0 EOF" ("->" marks a blocked waiter)
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
            try:
                return int(parts[4])
            except ValueError:
                return 0
    return None


def _probe(path: str) -> int | None:  # pragma: no cover - systems without /proc/locks
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return 0
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


async def holder_of(store: RunStore, run_id: str) -> int | str | None:
    """Who holds run ``run_id`` right now, or ``None``.

    A directory store: the pid holding the journal's lock (0 if unknown). PostgreSQL: the owner
    of the run's live lease (by the database's clock).
    """
    if isinstance(store, FileStore):
        return held_by(store.location(run_id))
    from ..postgres import PostgresStore  # not before a store is one: see ``tether.postgres``

    if isinstance(store, PostgresStore):
        return await store.holder(run_id)
    return None


class Version(NamedTuple):
    """One run in a look at the store: its version, who holds it (``None``: nobody), and its
    inbox's version (``None``: no answers wait), which changes when answers are queued for
    the run or its holder records them.

    A tuple, so that two looks of 10,000 runs compare (and are made) at C speed.
    """

    version: tuple[int, int]
    held_by: int | str | None = None
    inbox: Hashable | None = None


class Look(NamedTuple):
    """One look at a store (``look``)."""

    versions: dict[str, Version]
    odd: dict[str, str]
    """A directory store's odd entries (``FileStore.odd_entries``)."""
    inodes: dict[str, tuple[int, int]]
    """A directory store's journals' ``(st_ino, st_ctime_ns)``, from the ``stat`` that gave
    their versions (``tether.journal._listing.Listing.inodes``)."""


async def versions(store: RunStore) -> dict[str, Version]:
    """Every run of ``store`` with its version and holder, in one look.

    A directory store's version is the journal's ``(size, mtime_ns)`` (entries that are not
    regular files are left out, as ``list_runs`` does); PostgreSQL's is the run's
    ``(next_seq, epoch)``. Another store gives each run of ``list_runs`` the version
    ``(0, 0)``, which never changes: a caller must read such runs every time.

    Raises:
        OSError: the store's directory cannot be listed.
    """
    return (await look(store)).versions


async def look(store: RunStore, previous: dict[str, Version] | None = None) -> Look:
    """``versions``, and what else a directory store's one look at its directory gives.

    ``previous``: the last look's versions; a run whose version and holder are the same is
    given its ``Version`` from there, so that a look at a store where little changed makes
    (and leaves for the garbage collector) next to nothing.
    """
    if isinstance(store, FileStore):
        runs_dir = store.runs_dir
        # The store's own look: it also reports each odd entry (once), as ``odd_entries`` does.
        listing = await anyio.to_thread.run_sync(lambda: store._look(versions=True))
        held = await anyio.to_thread.run_sync(_holders_in, runs_dir, list(listing.runs))
        found = _reusing(listing.runs, held, listing.inbox_versions, previous or {})
        return Look(found, listing.odd, listing.inodes)
    from ..postgres import PostgresStore

    if isinstance(store, PostgresStore):
        found = {
            run_id: Version(version, holder, inbox)
            for run_id, (version, holder, inbox) in (await store.run_versions()).items()
        }
        return Look(found, {}, {})
    run_ids = await store.list_runs()
    looks = getattr(store, "inbox_versions", None)  # a store with an inbox (``Store``)
    inboxes = {} if looks is None else await looks(run_ids)
    found = {
        run_id: Version((0, 0), await holder_of(store, run_id), inboxes.get(run_id))
        for run_id in run_ids
    }
    return Look(found, {}, {})


def _reusing(
    runs: dict[str, tuple[int, int]],
    held: dict[str, int],
    inboxes: dict[str, tuple[int, int, int]],
    previous: dict[str, Version],
) -> dict[str, Version]:
    found: dict[str, Version] = {}
    last = previous.get
    holder = held.get
    inbox = inboxes.get
    for run_id, version in runs.items():
        by, box = holder(run_id), inbox(run_id)
        old = last(run_id)
        if old is not None and old.version == version and old.held_by == by and old.inbox == box:
            found[run_id] = old
        else:
            found[run_id] = Version(version, by, box)
    return found


def _holders_in(runs_dir: str, run_ids: list[str]) -> dict[str, int]:
    """``_holders_of`` the journals of ``run_ids`` in ``runs_dir``: none (and no path made or
    looked at) when nobody holds a lock on that directory's device."""
    locks = _lock_table()
    if locks is not None:
        try:
            dev = os.stat(runs_dir).st_dev
        except OSError:
            return {}
        on_device = f"{os.major(dev):02x}:{os.minor(dev):02x}:"
        if not any(key.startswith(on_device) for key in locks):
            return {}
    return _holders_of({run_id: journal_path(runs_dir, run_id) for run_id in run_ids}, locks)


def _lock_table() -> dict[str, int] | None:
    """``/proc/locks``' file locks: the pid (0 if unknown) by ``MAJ:MIN:INODE``, or ``None``
    where there is no such file."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:  # pragma: no cover - systems without /proc/locks
        return None
    locks: dict[str, int] = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK":
            try:
                locks[parts[5]] = int(parts[4])
            except ValueError:
                locks[parts[5]] = 0
    return locks


def _holders_of(paths: dict[str, str], locks: dict[str, int] | None) -> dict[str, int]:
    """The pid holding each path's ``flock`` (0 if unknown), for the paths someone holds:
    one ``stat`` per file, looked up in ``locks`` (``_lock_table``); without a table (no
    ``/proc/locks``), a probe each."""
    if locks is None:  # pragma: no cover - systems without /proc/locks
        found = {run_id: held_by(path) for run_id, path in paths.items()}
        return {run_id: pid for run_id, pid in found.items() if pid is not None}
    if not locks:
        return {}
    out: dict[str, int] = {}
    for run_id, path in paths.items():
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        pid = locks.get(f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}")
        if pid is not None:
            out[run_id] = pid
    return out
