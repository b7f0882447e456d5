"""What a store keeps beside a run's files, and the exact names a run's files have.

Beside ``runs/<run_id>.journal`` and ``runs/<run_id>.inbox``, a store keeps copies of the bytes
it takes out of them, for a person to look at:

- ``<file>.torn-<offset>``: the non-zero bytes of a torn tail cut off at ``offset``, when a
  journal is opened or an inbox is posted to;
- ``<file>.broken``: what ``tether journal repair`` moved out of a journal, or a damaged inbox
  as it was before it was cleared.

A copy whose name is taken gets ``.1``, ``.2``... after it. ``belongs_to`` tells by exact name
whether a file is one of a run's, so that ``tether gc`` removes exactly a run's files: a valid
run id can look like a leftover's name (``a.journal.torn-1`` is a run, not run ``a``'s copy).
"""

from __future__ import annotations

import os
import re

from ._file import FileOps

_RUN_FILE = r"\.(?:journal|inbox)(?:(?:\.torn-\d+|\.broken)(?:\.\d+)?)?"


def belongs_to(name: str, run_id: str) -> bool:
    """Whether ``name`` (a file in ``runs/``) is run ``run_id``'s journal, its inbox, or a
    copy kept beside either."""
    return re.fullmatch(re.escape(run_id) + _RUN_FILE, name) is not None


def free_name(base: str) -> str:
    """``base``, or ``base.1``, ``base.2``... whichever is not taken yet."""
    name, n = base, 1
    while os.path.exists(name):
        name = f"{base}.{n}"
        n += 1
    return name


def save_copy(dest: str, data: bytes, ops: FileOps) -> None:
    """Write ``data`` to the new file ``dest`` and make it durable (file and directory).

    Raises:
        FileExistsError: ``dest`` exists.
        OSError: it could not be written (nothing of it is then relied on).
    """
    fd = ops.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        ops.write_all(fd, data, 0)
        ops.fsync(fd)
    finally:
        ops.close(fd)
    ops.fsync_dir(os.path.dirname(dest) or ".")


def keep_torn_tail(path: str, data: bytes, end: int, ops: FileOps) -> str | None:
    """Save the non-zero bytes of ``data`` after ``end`` (a torn tail about to be cut off) to
    ``<path>.torn-<end>``; return where, or ``None`` if they are all zeros."""
    tail = data[end:].rstrip(b"\x00")
    if not tail:
        return None
    dest = free_name(f"{path}.torn-{end}")  # an earlier torn tail at the same offset: keep both
    save_copy(dest, tail, ops)
    return dest
