"""What a store's ``runs/`` directory holds: its runs, their inboxes, and what is neither.

A run is a *regular file* named ``<run_id>.journal``. Anything else under a run file's name (a
directory, a FIFO, a symbolic link, a socket, a device) is no run: it is left out of every
listing and reported by name instead, so that one odd entry never hides the other runs, and a
FIFO is never opened (an open of one blocks until a writer comes). Names starting with a dot
are a store's temporary files, never runs.

One ``scandir`` gives names and types (no ``stat`` per entry on filesystems that report types);
a run's size and time, which a sweep compares between two looks, cost one ``stat`` each, as
does each inbox (an empty one is no inbox).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ._file import kind_of
from ._inbox import empty

JOURNAL = ".journal"
INBOX = ".inbox"


@dataclass
class Listing:
    """One look at ``runs/``.

    Attributes:
        runs: the run ids, each with its journal's ``(size, mtime_ns)`` when asked for.
        inboxes: the runs with an inbox file that is not empty.
        odd: names of entries that look like a run's files but are not regular files, and
            what each is (``a FIFO``...).
        inodes: with the versions, each journal's ``(st_ino, st_ctime_ns)`` from the same
            ``stat`` (with its size and time, what says a file is the very one seen before).
        inbox_versions: with the versions, each inbox's ``(size, mtime_ns, st_ino)``, which
            changes when an answer is posted to it or it is cleared.
    """

    runs: dict[str, tuple[int, int]] = field(default_factory=dict)
    inboxes: set[str] = field(default_factory=set)
    odd: dict[str, str] = field(default_factory=dict)
    inodes: dict[str, tuple[int, int]] = field(default_factory=dict)
    inbox_versions: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def list_runs_dir(runs_dir: str, *, versions: bool = False) -> Listing:
    """Look at ``runs_dir`` once (blocking); ``versions``: also each journal's size and time.

    Raises:
        OSError: the directory cannot be listed (one that does not exist is empty).
    """
    listing = Listing()
    try:
        entries = os.scandir(runs_dir)
    except FileNotFoundError:
        return listing
    with entries:  # one entry at a time: a store of a million runs is never all in memory
        for entry in entries:
            _look_at(entry, listing, versions)
    return listing


def _look_at(entry: os.DirEntry[str], listing: Listing, versions: bool) -> None:
    name = entry.name
    if name.startswith(".") or not name.endswith((JOURNAL, INBOX)):
        return
    try:
        regular = entry.is_file(follow_symlinks=False)
        if not regular:
            listing.odd[name] = kind_of(entry.stat(follow_symlinks=False).st_mode)
            return
        if name.endswith(INBOX):
            run_id = name.removesuffix(INBOX)
            st = entry.stat(follow_symlinks=False)
            if empty(st):  # no answer waits in it (see ``_inbox.empty``)
                return
            if versions:
                listing.inbox_versions[run_id] = (st.st_size, st.st_mtime_ns, st.st_ino)
            listing.inboxes.add(run_id)
            return
        version = (0, 0)
        run_id = name.removesuffix(JOURNAL)
        if versions:
            st = entry.stat(follow_symlinks=False)
            version = (st.st_size, st.st_mtime_ns)
            listing.inodes[run_id] = (st.st_ino, st.st_ctime_ns)
    except FileNotFoundError:  # removed since the directory was read
        return
    listing.runs[run_id] = version
