"""``tether gc``: remove the journals of long-finished runs, then blobs nobody refers to.

A run is removed only when its journal says it finished (``run_finished``) longer ago than its
window, and only while this command holds the journal's lock (a journal another process holds
is left alone). Unfinished runs are never touched. With the journal go exactly the run's other
files, matched by their whole name (``_leftovers.belongs_to``): its inbox and the copies kept
beside either (``.torn-<offset>``, ``.broken``, with ``.<n>`` when repeated). A prefix would
not do: ``a.journal.torn-1`` is a valid run id, and its files are not run ``a``'s. The journal
goes last, so that a gc interrupted half-way finds the run, and what is left of it, next time.

Blob writes that never finished leave temporary files (``blobs/<aa>/<digest>.<pid>.<tid>.tmp``);
those older than ``TEMP_GRACE`` (an hour: no write takes that long) are removed too.

A blob is removed only when no remaining journal refers to it. A tool result's blob is written
before the record that refers to it, and an identical payload reuses the stored file, so a
process advancing a run could be about to refer to an old, unreferenced blob. Candidates are
therefore first renamed aside; the journals are read again; and they are removed only if no
journal is held by another process at that point and none refers to them, otherwise they are
put back.

On a PostgreSQL store (``--store URL``) the same runs are chosen; a run is deleted (with its
events and inbox) only if nobody holds a live lease on it, and blobs are deleted under a lock
that keeps workers from writing meanwhile, only while no run has an owner (see
``tether.postgres._admin``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import InvalidRunIdError, JournalError, JournalLockedError, RunNotFoundError
from .._failpoints import failpoint
from ..journal import AnyEvent, FileStore, Store, ToolResult
from ..journal._layout import ASIDE, DEFAULT_FILE_OPS, belongs_to
from ..operate import RunSummary, summarize
from ..operate._display import format_age, held_by, holder_of, unreadable
from ..supervisor import RunStatus, fold
from ._view import add_store_options, execute, open_store, using

if TYPE_CHECKING:
    from ..postgres import PostgresStore

DAY = 86400.0
TEMP_GRACE = 3600.0
"""Seconds a blob write's temporary file is left alone: older, its writer is surely gone."""
SHORT_WINDOW = (RunStatus.DONE.value, RunStatus.CANCELLED.value)


def add_gc_command(commands: Any) -> None:
    gc = commands.add_parser(
        "gc",
        help="remove old finished runs and unreferenced blobs",
        description="Remove the journals of finished runs older than their window, counted "
        "from run_finished: --keep-days for done and cancelled runs, --keep-failed-days for "
        "failed runs (and any other final status). Unfinished runs, and journals another "
        "process holds, are never touched; a removed run's inbox and .torn-*/.broken copies go "
        "with it (matched by exact name). Then remove blobs under blobs/ that no remaining "
        "journal refers to (skipped while another process holds a journal, or when a journal "
        "cannot be read), and temporary files of blob writes that never finished, once older "
        "than an hour. Prints what it "
        "removed, or with --dry-run what it would remove. On a PostgreSQL store (--store URL) "
        "the same runs go, with their events and inbox, unless a worker holds a live lease on "
        "one; blobs in the blobs table go only while no worker holds any run. Exit 0; 1 if a "
        "journal could not be read (nothing of it, and no blob, is removed); 3 on an I/O "
        "error or if the store cannot be reached.",
    )
    add_store_options(gc)
    gc.add_argument(
        "--keep-days",
        metavar="N",
        type=_days,
        default=7.0,
        help="keep done and cancelled runs this many days after they finished (default: 7)",
    )
    gc.add_argument(
        "--keep-failed-days",
        metavar="M",
        type=_days,
        default=30.0,
        help="keep failed runs this many days after they finished (default: 30)",
    )
    gc.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; change nothing"
    )
    gc.set_defaults(handler=_gc)


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"days must be 0 or more, not {text!r}")
    return value


@dataclass
class _Plan:
    remove: list[RunSummary] = field(default_factory=list)
    keep_events: dict[str, list[AnyEvent]] = field(default_factory=dict)
    unreadable: list[RunSummary] = field(default_factory=list)
    locked: list[RunSummary] = field(default_factory=list)
    strays: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not runs at all
    unfinished: int = 0
    recent: int = 0


def _gc(args: argparse.Namespace) -> int:
    async def command() -> int:
        async with using(open_store(args), write=not args.dry_run, existing=True) as store:
            return await _run(store, args)

    return execute(args, command)


async def _run(store: Store, args: argparse.Namespace) -> int:
    now = time.time()
    plan = await _plan(store, args, now)
    would = "would remove" if args.dry_run else "removed"
    removed = 0
    for s in plan.remove:
        age = format_age(now - (s.finished_at or now))
        if args.dry_run:
            others = _others_of(store, s.run_id) if isinstance(store, FileStore) else []
            also = f" and {', '.join(others)}" if others else ""
            print(f"{would} run {s.run_id} ({s.status} {age} ago){also}")
            removed += 1
            continue
        gone = await _remove(store, s.run_id)
        if gone is None:
            print(f"kept run {s.run_id}: busy in another process")
            continue
        removed += 1
        extra = f" and {', '.join(gone)}" if gone else ""
        print(f"{would} run {s.run_id} ({s.status} {age} ago){extra}")
    if removed and not args.dry_run and isinstance(store, FileStore):
        DEFAULT_FILE_OPS.fsync_dir(store.runs_dir)
    for s in plan.locked:
        print(f"kept run {s.run_id}: its journal is held by another process")
    for s in plan.unreadable:
        print(f"kept run {s.run_id}: {s.reason}")
    for name, why in plan.strays:
        print(f"left alone: {name} ({why})")

    dropped = {s.run_id for s in plan.remove} if args.dry_run else set()
    blob_count, blob_bytes, blob_note = await _collect_blobs(store, args.dry_run, dropped)
    temps = _collect_temp_files(store, args.dry_run, now) if isinstance(store, FileStore) else 0
    also = f" and {temps} unfinished blob write(s)" if temps else ""
    print(
        f"{'dry run: ' if args.dry_run else ''}{would} {removed} run(s) and {blob_count} "
        f"blob(s) ({blob_bytes} bytes){also}; kept {plan.unfinished} unfinished, {plan.recent} "
        f"finished within their window, {len(plan.locked)} old but held by a process, "
        f"{len(plan.unreadable)} unreadable"
    )
    if blob_note:
        print(blob_note)
    return 1 if plan.unreadable else 0


async def _plan(store: Store, args: argparse.Namespace, now: float) -> _Plan:
    plan = _Plan()
    for run_id in await store.list_runs():
        try:
            events = await store.read(run_id)
        except RunNotFoundError:
            continue
        except InvalidRunIdError as exc:  # a stray file: no run's, so no blob's either
            plan.strays.append((f"runs/{run_id}.journal", exc.reason))
            continue
        except JournalError as exc:
            plan.unreadable.append(unreadable(run_id, str(exc)))
            continue
        summary = summarize(run_id, events, await holder_of(store, run_id))
        if not summary.readable:
            plan.unreadable.append(summary)
            continue
        if summary.finished_at is None:
            plan.unfinished += 1
        else:
            days = args.keep_days if summary.status in SHORT_WINDOW else args.keep_failed_days
            if now - summary.finished_at < days * DAY or not summary.finished_at:
                plan.recent += 1
            elif summary.held_by is not None:
                plan.locked.append(summary)
            else:
                plan.remove.append(summary)
                continue
        plan.keep_events[run_id] = events
    return plan


async def _remove(store: Store, run_id: str) -> list[str] | None:
    """Remove a finished run; the leftovers removed with it, or ``None`` if it is busy."""
    if isinstance(store, FileStore):
        return await _remove_run(store, run_id)
    from ..postgres import PostgresStore, _admin  # with a database store only

    if isinstance(store, PostgresStore):
        outcome = await _admin.remove_run(store, run_id)
        return None if outcome in ("held", "unfinished") else []
    raise TypeError(f"tether gc cannot remove runs from a {type(store).__name__}")


async def _remove_run(store: FileStore, run_id: str) -> list[str] | None:
    """Remove a finished run's files under its journal's lock: the journal last; the others
    removed with it, or ``None`` if the run is busy."""
    try:
        journal = await store.open(run_id)
    except JournalLockedError:
        return None
    except RunNotFoundError:
        return []
    async with journal:
        if fold(journal.events).finished is None:  # pragma: no cover - cannot happen today
            return None
        gone: list[str] = []
        for name in _others_of(store, run_id):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(store.runs_dir, name))
                gone.append(name)
        os.unlink(journal.path)
    return gone


def _others_of(store: FileStore, run_id: str) -> list[str]:
    """The files of ``runs/`` that go with run ``run_id``'s journal (its inbox, what was
    kept of a torn tail or a broken inbox), by name."""
    own = os.path.basename(store.location(run_id))
    return [n for n in sorted(os.listdir(store.runs_dir)) if n != own and belongs_to(n, run_id)]


def _collect_temp_files(store: FileStore, dry_run: bool, now: float) -> int:
    """Remove the temporary files of blob writes older than ``TEMP_GRACE``; how many."""
    count = 0
    for path in store.blobs.temp_files():
        try:
            st = os.stat(path)
        except FileNotFoundError:  # its write just finished
            continue
        age = now - st.st_mtime
        if age < TEMP_GRACE:
            continue  # may be a write under way
        name = os.path.relpath(path, store.root)
        what = f"unfinished blob write {name} ({st.st_size} bytes, {format_age(age)} old)"
        if not dry_run:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
        print(f"{'would remove' if dry_run else 'removed'} {what}")
        count += 1
    return count


async def _references(
    store: Store,
    exclude: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[set[str], list[str]]:
    """Digests referred to by the journals (but ``exclude``), and the unreadable runs."""
    refs: set[str] = set()
    bad: list[str] = []
    for run_id in await store.list_runs():
        if run_id in exclude:
            continue
        try:
            events = await store.read(run_id)
        except (RunNotFoundError, InvalidRunIdError):
            continue  # gone since, or a stray file that is no run's (so refers to no blob)
        except JournalError:
            bad.append(run_id)
            continue
        refs.update(e.blob.digest for e in events if isinstance(e, ToolResult) and e.blob)
    return refs, bad


def _held(store: FileStore) -> list[str]:
    try:
        names = os.listdir(store.runs_dir)
    except FileNotFoundError:
        return []
    return sorted(
        n.removesuffix(".journal")
        for n in names
        if n.endswith(".journal")
        and not n.startswith(".")
        and held_by(os.path.join(store.runs_dir, n)) is not None
    )


async def _collect_blobs(store: Store, dry_run: bool, dropped: set[str]) -> tuple[int, int, str]:
    """Remove unreferenced blobs; return how many, their bytes, and a note on what was kept.

    ``dropped``: runs a dry run would have removed (their references do not count).
    """
    if not isinstance(store, FileStore):
        from ..postgres import PostgresStore

        if isinstance(store, PostgresStore):
            return await _collect_pg_blobs(store, dry_run, dropped)
        raise TypeError(f"tether gc cannot collect the blobs of a {type(store).__name__}")
    refs, bad = await _references(store, dropped)
    if bad:
        return 0, 0, _unreadable_note(bad)
    blobs = store.blobs
    if not dry_run:
        _put_back(store)
    candidates = [d for d in blobs.digests() if d not in refs]
    sizes = {d: _size(blobs.path(d)) for d in candidates}
    if not candidates:
        return 0, 0, ""
    if dry_run:
        return _would_remove(sizes)
    held = _held(store)
    if held:
        return 0, 0, _busy_note(len(candidates), held)
    for d in candidates:
        os.replace(blobs.path(d), blobs.path(d) + ASIDE)
    failpoint("gc_set_aside")
    held = _held(store)
    refs, bad = await _references(store)
    keep = set(candidates) if held or bad else {d for d in candidates if d in refs}
    count, size = _settle(store, candidates, keep, sizes)
    if held:
        return count, size, _busy_note(len(candidates), held)
    if bad:
        return count, size, _unreadable_note(bad)
    return count, size, ""


async def _collect_pg_blobs(
    store: PostgresStore, dry_run: bool, dropped: set[str]
) -> tuple[int, int, str]:
    """``_collect_blobs`` on PostgreSQL: the deletion itself is ``_admin.remove_blobs``."""
    from ..postgres import _admin

    versions = await _admin.run_versions(store)  # before reading: a change since is seen
    refs, bad = await _references(store, dropped)
    if bad:
        return 0, 0, _unreadable_note(bad)
    sizes = {d: n for d, n in (await _admin.blob_sizes(store)).items() if d not in refs}
    if not sizes:
        return 0, 0, ""
    if dry_run:
        return _would_remove(sizes)
    outcome = await _admin.remove_blobs(store, sizes, versions)
    if outcome.held:
        return 0, 0, _busy_note(len(sizes), outcome.held)
    if outcome.unreadable:
        return 0, 0, _unreadable_note(outcome.unreadable)
    if outcome.lock_timeout:
        return 0, 0, _LOCKED.format(n=len(sizes))
    for d, n in outcome.removed.items():
        print(f"removed blob {d} ({n} bytes)")
    return len(outcome.removed), sum(outcome.removed.values()), ""


_LOCKED = (
    "blobs not collected: {n} unreferenced blob(s) kept because other sessions kept the runs "
    "table locked; run gc again"
)


def _would_remove(sizes: dict[str, int]) -> tuple[int, int, str]:
    for d, n in sizes.items():
        print(f"would remove blob {d} ({n} bytes)")
    return len(sizes), sum(sizes.values()), ""


def _unreadable_note(bad: list[str]) -> str:
    return f"blobs not collected: cannot read the journal of {', '.join(bad)}"


def _settle(
    store: FileStore, candidates: list[str], keep: set[str], sizes: dict[str, int]
) -> tuple[int, int]:
    """Put back the candidates in ``keep``, remove the others; fsync the folders."""
    blobs = store.blobs
    count = size = 0
    folders: set[str] = set()
    for d in candidates:
        path = blobs.path(d)
        folders.add(os.path.dirname(path))
        if d in keep and not os.path.exists(path):
            os.replace(path + ASIDE, path)
            continue
        try:
            os.unlink(path + ASIDE)  # removed, or rewritten meanwhile by a process that needed it
        except FileNotFoundError:
            continue  # put back by a read that needed it: it stays
        if d not in keep:
            count += 1
            size += sizes[d]
            print(f"removed blob {d} ({sizes[d]} bytes)")
    for folder in sorted(folders):
        DEFAULT_FILE_OPS.fsync_dir(folder)
    return count, size


def _put_back(store: FileStore) -> None:
    """Put back what an interrupted gc left set aside (or drop the copy set aside when the blob
    was written again since), so that this gc decides about it afresh."""
    blobs = store.blobs
    for d in blobs.set_aside():
        if blobs.put_back(d):
            print(f"put back blob {d}, set aside by an interrupted gc")
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(blobs.path(d) + ASIDE)


def _busy_note(n: int, held: list[str]) -> str:
    return (
        f"blobs not collected: {n} unreferenced blob(s) kept because another process holds "
        f"the journal of {', '.join(held)} (it may be about to refer to one); run gc again "
        "when it rests"
    )


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0
