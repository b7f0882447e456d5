"""``tether gc``: remove the journals of long-finished runs, then blobs nobody refers to.

A run is removed only when its journal says it finished (``run_finished``) longer ago than its
window, and only while this command holds the journal's lock (a journal another process holds
is left alone). Unfinished runs are never touched.

A blob is removed only when no remaining journal refers to it. A tool result's blob is written
before the record that refers to it, and an identical payload reuses the stored file, so a
process advancing a run could be about to refer to an old, unreferenced blob. Candidates are
therefore first renamed aside; the journals are read again; and they are removed only if no
journal is held by another process at that point and none refers to them, otherwise they are
put back.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import JournalError, JournalLockedError, RunNotFoundError
from ..journal._file import DEFAULT_FILE_OPS
from ..journal._records import AnyEvent, ToolResult
from ..journal._store import FileStore
from ..supervisor._state import RunStatus, fold
from ._view import (
    RunSummary,
    execute,
    format_age,
    held_by,
    open_store,
    summarize,
    unreadable,
)

DAY = 86400.0
SHORT_WINDOW = (RunStatus.DONE.value, RunStatus.CANCELLED.value)
TRASH = ".gc"


def add_gc_command(commands: Any, add_root: Callable[[argparse.ArgumentParser], None]) -> None:
    gc = commands.add_parser(
        "gc",
        help="remove old finished runs and unreferenced blobs",
        description="Remove the journals of finished runs older than their window, counted "
        "from run_finished: --keep-days for done and cancelled runs, --keep-failed-days for "
        "failed runs (and any other final status). Unfinished runs, and journals another "
        "process holds, are never touched; a removed run's .torn-*/.broken leftovers go with "
        "it. Then remove blobs under blobs/ that no remaining journal refers to (skipped while "
        "another process holds a journal, or when a journal cannot be read). Prints what it "
        "removed, or with --dry-run what it would remove. Exit 0; 1 if a journal could not be "
        "read (nothing of it, and no blob, is removed); 3 on an I/O error.",
    )
    add_root(gc)
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
    unfinished: int = 0
    recent: int = 0


def _gc(args: argparse.Namespace) -> int:
    async def command() -> int:
        store = open_store(args.root)
        async with contextlib.AsyncExitStack() as stack:
            if not args.dry_run:
                await stack.enter_async_context(store)
            return await _run(store, args)

    return execute(args, command)


async def _run(store: FileStore, args: argparse.Namespace) -> int:
    now = time.time()
    plan = await _plan(store, args, now)
    would = "would remove" if args.dry_run else "removed"
    removed = 0
    for s in plan.remove:
        age = format_age(now - (s.finished_at or now))
        if args.dry_run:
            print(f"{would} run {s.run_id} ({s.status} {age} ago)")
            removed += 1
            continue
        gone = await _remove_run(store, s.run_id)
        if gone is None:
            print(f"kept run {s.run_id}: busy in another process")
            continue
        removed += 1
        extra = f" and {', '.join(gone)}" if gone else ""
        print(f"{would} run {s.run_id} ({s.status} {age} ago){extra}")
    if removed and not args.dry_run:
        DEFAULT_FILE_OPS.fsync_dir(store.runs_dir)
    for s in plan.locked:
        print(f"kept run {s.run_id}: its journal is held by another process")
    for s in plan.unreadable:
        print(f"kept run {s.run_id}: {s.reason}")

    dropped = {s.run_id for s in plan.remove} if args.dry_run else set()
    blob_count, blob_bytes, blob_note = await _collect_blobs(store, args.dry_run, dropped)
    print(
        f"{'dry run: ' if args.dry_run else ''}{would} {removed} run(s) and {blob_count} "
        f"blob(s) ({blob_bytes} bytes); kept {plan.unfinished} unfinished, {plan.recent} "
        f"finished within their window, {len(plan.locked)} held, "
        f"{len(plan.unreadable)} unreadable"
    )
    if blob_note:
        print(blob_note)
    return 1 if plan.unreadable else 0


async def _plan(store: FileStore, args: argparse.Namespace, now: float) -> _Plan:
    plan = _Plan()
    for run_id in await store.list_runs():
        try:
            events = await store.read(run_id)
        except RunNotFoundError:
            continue
        except JournalError as exc:
            plan.unreadable.append(unreadable(run_id, str(exc)))
            continue
        summary = summarize(run_id, events, held_by(store.path(run_id)))
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


async def _remove_run(store: FileStore, run_id: str) -> list[str] | None:
    """Remove a finished run's journal (and leftovers) under its lock; ``None`` if busy."""
    try:
        journal = await store.open(run_id)
    except JournalLockedError:
        return None
    except RunNotFoundError:
        return []
    async with journal:
        if fold(journal.events).finished is None:  # pragma: no cover - cannot happen today
            return None
        os.unlink(journal.path)
        gone: list[str] = []
        prefix = f"{run_id}.journal."
        for name in sorted(os.listdir(store.runs_dir)):
            if name.startswith((prefix + "torn-", prefix + "broken")) and not name.endswith(
                ".journal"
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(store.runs_dir, name))
                    gone.append(name)
    return gone


async def _references(
    store: FileStore,
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
        except RunNotFoundError:
            continue
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


async def _collect_blobs(
    store: FileStore, dry_run: bool, dropped: set[str]
) -> tuple[int, int, str]:
    """Remove unreferenced blobs; return how many, their bytes, and a note on what was kept.

    ``dropped``: runs a dry run would have removed (their references do not count).
    """
    refs, bad = await _references(store, dropped)
    if bad:
        return 0, 0, f"blobs not collected: cannot read the journal of {', '.join(bad)}"
    blobs = store.blobs
    candidates = [d for d in blobs.digests() if d not in refs]
    sizes = {d: _size(blobs.path(d)) for d in candidates}
    if not candidates:
        return 0, 0, ""
    if dry_run:
        for d in candidates:
            print(f"would remove blob {d} ({sizes[d]} bytes)")
        return len(candidates), sum(sizes.values()), ""
    held = _held(store)
    if held:
        return 0, 0, _busy_note(len(candidates), held)
    for d in candidates:
        os.replace(blobs.path(d), blobs.path(d) + TRASH)
    held = _held(store)
    refs, bad = await _references(store)
    keep = set(candidates) if held or bad else {d for d in candidates if d in refs}
    count, size = _settle(store, candidates, keep, sizes)
    if held:
        return count, size, _busy_note(len(candidates), held)
    if bad:
        return count, size, f"blobs not collected: cannot read the journal of {', '.join(bad)}"
    return count, size, ""


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
            os.replace(path + TRASH, path)
            continue
        os.unlink(path + TRASH)  # removed, or rewritten meanwhile by a process that needed it
        if d not in keep:
            count += 1
            size += sizes[d]
            print(f"removed blob {d} ({sizes[d]} bytes)")
    for folder in sorted(folders):
        DEFAULT_FILE_OPS.fsync_dir(folder)
    return count, size


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
