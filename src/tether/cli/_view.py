"""What the operator commands know about a run, computed from its journal alone.

Pure helpers shared by ``tether runs``, ``show``, ``approve``/``reject``/``resolve``,
``cancel`` and ``gc``: a run's summary (status, counters, what it waits for), one-line
descriptions of events, a look at whether another process holds a run (a journal's lock, or a
live lease in PostgreSQL), and the options naming the store (``--root DIR`` or ``--store URL``).

No application is loaded here: a run's status is what ``tether.supervisor.run_status`` reads
from its journal, the same function the supervisor uses, with the approval flags and deadlines
the run's manifest pinned.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import fcntl
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import msgspec

from .._errors import (
    InvalidRunIdError,
    JournalBrokenError,
    JournalCorruptError,
    JournalError,
    JournalIOError,
    JournalLockedError,
    JournalVersionError,
    RunNotFoundError,
    RunStateError,
    StoreSchemaError,
)
from .._store_url import is_postgres, store_for
from ..journal._records import (
    AnyEvent,
    ChildEnded,
    Decision,
    Escalated,
    ModelFailed,
    ModelResponse,
    Parked,
    Resolved,
    Resumed,
    Retried,
    RunFinished,
    RunStarted,
    Signal,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
)
from ..journal._records import Waiting as WaitRecord
from ..journal._store import FileStore, Store
from ..postgres import PostgresStore
from ..postgres._schema import check_schema_name
from ..supervisor._state import RunState, RunStatus, fold, result_text
from ..supervisor._status import run_status

WaitKind = Literal["approval", "resolution"]


@dataclass(frozen=True)
class Waiting:
    """One call a person has to answer."""

    call_id: str
    tool: str
    kind: WaitKind
    since: float
    reason: str = ""

    def describe(self) -> str:
        return f"{self.call_id} {self.tool}" + (f" ({self.reason})" if self.reason else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "awaiting": self.kind,
            "since": self.since,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RunSummary:
    """A run as the operator commands report it."""

    run_id: str
    status: str
    reason: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    last_at: float | None = None
    model_calls: int = 0
    tool_calls: int = 0
    restarts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    events: int = 0
    waiting: tuple[Waiting, ...] = ()
    final_text: str | None = None
    held_by: int | str | None = None
    readable: bool = True
    parent: str | None = None
    state: RunState | None = field(default=None, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def age(self, now: float) -> float | None:
        """Seconds since the run started."""
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def detail(self) -> str:
        """What the run waits for, or why it stopped, in one line."""
        parts: list[str] = []
        for kind in ("approval", "resolution"):
            calls = [w for w in self.waiting if w.kind == kind]
            if calls:
                parts.append(f"awaiting {kind}: " + ", ".join(w.describe() for w in calls))
        if self.held_by is not None and not self.finished:
            parts.append(_holder_text(self.held_by))
        elif self.status == RunStatus.RUNNING and self.readable:
            parts.append("no process holds it: continues when a supervisor picks it up")
        if self.reason and not self.waiting and self.status != RunStatus.DONE:
            parts.append(self.reason)
        if self.parent is not None:
            parts.append(f"child of {self.parent}")
        return "; ".join(parts)

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "waiting": [w.as_dict() for w in self.waiting],
            "age_s": self.age(now),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "last_event_at": self.last_at,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "restarts": self.restarts,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "events": self.events,
            "held_by": self.held_by,
            "readable": self.readable,
            "parent": self.parent,
            "final_text": self.final_text,
        }


def _holder_text(holder: int | str) -> str:
    if isinstance(holder, str):
        return f"held by worker {holder}"  # a PostgreSQL lease's owner
    return f"held by pid {holder}" if holder else "held by a process"


def unreadable(run_id: str, problem: str) -> RunSummary:
    """The summary of a run whose journal cannot be read or folded."""
    return RunSummary(
        run_id=run_id,
        status=RunStatus.NEEDS_ATTENTION.value,
        reason=f"journal cannot be read: {problem}",
        readable=False,
    )


def summarize(run_id: str, events: list[AnyEvent], held_by: int | str | None = None) -> RunSummary:
    """The summary of a run from its events (and who holds it, if anyone: see ``holder_of``).

    A journal that cannot be folded gives an unreadable summary rather than an error.
    """
    try:
        state = fold(events)
    except ValueError as exc:
        return unreadable(run_id, str(exc))
    if state.started is None:
        return RunSummary(
            run_id=run_id,
            status=RunStatus.NEEDS_ATTENTION.value,
            reason="the journal has no run_started record",
            events=len(events),
            held_by=held_by,
            state=state,
        )
    status, reason, waiting = status_of(state, time.time())
    if held_by is not None and state.finished is None:
        status, reason = RunStatus.RUNNING, ""  # a process is advancing it right now
    return RunSummary(
        run_id=run_id,
        status=status.value,
        reason=reason,
        started_at=state.started.at,
        finished_at=state.finished.at if state.finished is not None else None,
        last_at=events[-1].at if events else None,
        model_calls=state.model_calls,
        tool_calls=state.tool_calls,
        restarts=state.restarts,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_creation_tokens=state.cache_creation_tokens,
        cache_read_tokens=state.cache_read_tokens,
        events=len(events),
        waiting=waiting if status is not RunStatus.RUNNING else (),
        final_text=state.final_text,
        held_by=held_by,
        parent=state.started.parent,
        state=state,
    )


def status_of(state: RunState, now: float) -> tuple[RunStatus, str, tuple[Waiting, ...]]:
    """Status, reason and the calls waiting for a person, as ``run_status`` says at ``now``."""
    outcome = run_status(state, now)
    waiting: list[Waiting] = []
    for call_id in outcome.pending:
        call = state.calls[call_id]
        if call.escalated and call.escalation is not None:
            waiting.append(
                Waiting(
                    call.id, call.name, "resolution", call.escalation.at, call.escalation.reason
                )
            )
        else:
            waiting.append(Waiting(call.id, call.name, "approval", call.started_at))
    return outcome.status, outcome.reason, tuple(waiting)


# ---------------------------------------------------------------------------- lock probe


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


async def holder_of(store: Store, run_id: str) -> int | str | None:
    """Who holds run ``run_id`` right now, or ``None``.

    A directory store: the pid holding the journal's lock (0 if unknown). PostgreSQL: the owner
    of the run's live lease (by the database's clock).
    """
    if isinstance(store, FileStore):
        return held_by(store.path(run_id))
    if isinstance(store, PostgresStore):
        return await store.holder(run_id)
    return None


# ---------------------------------------------------------------------------- text


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def as_json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def format_time(at: float) -> str:
    """A wall-clock time as ``2026-12-04 09:00:00 UTC``."""
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``4d03h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def call_text(name: str, args: Any, limit: int = 80) -> str:
    """``name(key="value", n=3)``, shortened."""
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={as_json(v)}" for k, v in args.items())
    else:
        inner = "" if args is None else as_json(args)
    return shorten(f"{name}({inner})", limit)


def describe(event: AnyEvent, names: dict[str, str], limit: int = 100) -> str:
    """One line saying what ``event`` records; ``names`` maps call ids to tool names."""

    def tool(call_id: str) -> str:
        name = names.get(call_id)
        return f"{name} [{call_id}]" if name else f"[{call_id}]"

    if isinstance(event, RunStarted):
        m = event.manifest
        prompt = ""
        if event.messages:
            content = event.messages[-1].get("content")
            prompt = content if isinstance(content, str) else as_json(content)
        text = f"model {m.model}, {len(m.tools)} tool(s)"
        if m.app_version:
            text += f", app {m.app_version}"
        return shorten(f"{text}; prompt: {as_json(prompt)}", limit)
    if isinstance(event, ModelResponse):
        content = event.message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        parts: list[str] = []
        if event.stop_reason not in (None, "end_turn", "tool_use"):
            parts.append(f"stopped: {event.stop_reason}")
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use":
                call_id, name = str(block.get("id", "?")), str(block.get("name", "?"))
                names[call_id] = name
                parts.append(f"asks for {call_text(name, block.get('input'), 60)} [{call_id}]")
            elif kind == "server_tool_use":
                name = str(block.get("name", "?"))
                parts.append(f"server ran {call_text(name, block.get('input'), 60)}")
            elif kind == "text" and block.get("text"):
                parts.append(f"says {as_json(shorten(str(block['text']), 60))}")
        cache = event.usage.cache_creation_input_tokens + event.usage.cache_read_input_tokens
        if cache:
            parts.append(
                f"cache: {event.usage.cache_creation_input_tokens} written, "
                f"{event.usage.cache_read_input_tokens} read"
            )
        return shorten("; ".join(parts) or "(empty answer)", limit)
    if isinstance(event, ToolStarted):
        return f"{tool(event.call_id)} attempt {event.attempt}"
    if isinstance(event, ToolResult):
        if event.blob is not None:
            body = f"blob {event.blob.size} bytes: {event.blob.summary}"
        else:
            body = result_text(event.content)
        return shorten(f"{tool(event.call_id)} {'ok' if event.ok else 'error'}: {body}", limit)
    if isinstance(event, Decision):
        verb = "approved" if event.approved else "rejected"
        note = f": {event.note}" if event.note else ""
        return shorten(f"{verb} {tool(event.call_id)} by {event.by}{note}", limit)
    if isinstance(event, Escalated):
        return shorten(f"{tool(event.call_id)}: {event.reason}", limit)
    if isinstance(event, Resolved):
        text = f"{tool(event.call_id)} {event.outcome}"
        if event.by:
            text += f" by {event.by}"
        if event.result is not None:
            text += f", result {as_json(event.result)}"
        if event.note:
            text += f": {event.note}"
        return shorten(text, limit)
    if isinstance(event, Resumed):
        counted = "" if event.charged else ", not counted"
        return shorten(
            f"restart {event.attempt} on {event.host or '?'} (pid {event.pid}) after "
            f"{event.cause}{counted}",
            limit,
        )
    if isinstance(event, Suspended):
        return shorten(f"suspended by {event.host or '?'} (pid {event.pid}): {event.reason}", limit)
    if isinstance(event, ModelFailed):
        text = f"{event.kind}: {event.error}"
        if event.retry_at is not None:
            text += f"; asked again at +{max(0.0, event.retry_at - event.at):.1f}s"
        return shorten(text, limit)
    if isinstance(event, ToolFailed):
        what = "ended, outcome unknown" if event.timed_out else "failed"
        text = f"{tool(event.call_id)} attempt {event.attempt} {what}: {event.error}"
        return shorten(text, limit)
    if isinstance(event, Parked):
        return shorten(f"needs_attention ({event.cause}): {event.reason}", limit)
    if isinstance(event, WaitRecord):
        if event.child is not None:
            what = f"waits for child run {event.child.get('run_id')}"
        elif event.event is not None:
            what = f"waits for event {event.event}"
        else:
            what = "sleeps"
        if event.until is not None:
            what += f" until {format_time(event.until)}"
        return shorten(f"{tool(event.call_id)} {what}", limit)
    if isinstance(event, Signal):
        by = f" from {event.by}" if event.by else ""
        return shorten(f"{event.name} ({event.signal_id}){by}: {as_json(event.payload)}", limit)
    if isinstance(event, ChildEnded):
        text = event.final_text if event.final_text is not None else event.reason
        return shorten(f"child run {event.child} ended {event.status}: {text}", limit)
    if isinstance(event, Retried):
        text = "retried" + (f" by {event.by}" if event.by else "")
        if event.budgets is not None:
            text += f", budgets {as_json(msgspec.to_builtins(event.budgets))}"
        if event.note:
            text += f": {event.note}"
        return shorten(text, limit)
    if isinstance(event, RunFinished):
        return shorten(event.status + (f": {event.reason}" if event.reason else ""), limit)
    return ""  # pragma: no cover - every event type is handled above


def table(rows: list[list[str]]) -> list[str]:
    """Rows as plain, left-aligned columns (the last column is not padded)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]).rstrip()
        for r in rows
    ]


# ---------------------------------------------------------------------------- loading


DEFAULT_SCHEMA = "tether"


class StoreMissingError(Exception):
    """The store named on the command line cannot be used: no such directory, bad URL."""


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--root DIR`` or ``--store URL`` (one of them, required), and ``--schema NAME``."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--root",
        metavar="DIR",
        help="the store's directory (holding runs/ and blobs/)",
    )
    where.add_argument(
        "--store",
        metavar="URL",
        help="the store: a PostgreSQL database as postgresql://USER@HOST[:PORT]/DBNAME (or "
        "postgres://...); the password is best left to PGPASSWORD or ~/.pgpass, and is never "
        "printed. A directory path is also accepted and means the same as --root",
    )
    parser.add_argument(
        "--schema",
        metavar="NAME",
        type=_schema_name,
        default=None,
        help=f"with a PostgreSQL --store: the schema holding tether's tables (default: "
        f"{DEFAULT_SCHEMA}; `tether worker` creates it, the other commands require it)",
    )
    parser.set_defaults(store_parser=parser)


def _schema_name(text: str) -> str:
    try:
        return check_schema_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def store_spec(args: argparse.Namespace) -> str:
    """The store as given: ``--store``'s URL or path, else ``--root``'s directory."""
    spec: str = args.store if args.store is not None else args.root
    return spec


def uses_postgres(args: argparse.Namespace) -> bool:
    return is_postgres(store_spec(args))


def schema_of(args: argparse.Namespace) -> str:
    return str(args.schema or DEFAULT_SCHEMA)


def check_store_usage(args: argparse.Namespace, pg_only: dict[str, object] | None = None) -> None:
    """Refuse options that need PostgreSQL with a directory, and URLs of other kinds.

    Exits with argparse's usage error (code 2). ``pg_only`` maps more such options (their flag)
    to their values (``None`` when not given).
    """
    spec = store_spec(args)
    if is_postgres(spec):
        return
    if args.store is not None and "://" in spec:
        scheme = spec.partition("://")[0]
        args.store_parser.error(
            f"--store: {scheme}:// is not a store; give a postgresql:// URL or a directory"
        )
    for flag, value in {"--schema": args.schema, **(pg_only or {})}.items():
        if value is not None:
            args.store_parser.error(f"{flag} applies only to a PostgreSQL --store (postgresql://)")


def public_url(url: str) -> str:
    """A PostgreSQL URL for messages: scheme, user, host, port and database, no password.

    The query is left out too (libpq accepts ``?password=`` there).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{url.partition('://')[0]}://..."
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    path = parts.path if "@" not in parts.path else "/..."  # a password with an unquoted '/'
    return f"{parts.scheme}://{user + '@' if user else ''}{hosts}{path}"


def store_flags(args: argparse.Namespace) -> str:
    """The options naming the store, as given (``--root X`` or ``--store URL [--schema S]``).

    For the commands a message suggests; a URL's password is left out.
    """
    if args.store is None:
        return f"--root {shlex.quote(args.root)}"
    if not uses_postgres(args):
        return f"--store {shlex.quote(args.store)}"
    flags = f"--store {shlex.quote(public_url(args.store))}"
    if schema_of(args) != DEFAULT_SCHEMA:
        flags += f" --schema {schema_of(args)}"
    return flags


def store_label(args: argparse.Namespace) -> str:
    """The store in a sentence: its directory, or ``URL (schema S)`` without the password."""
    spec = store_spec(args)
    if not is_postgres(spec):
        return spec
    return f"{public_url(spec)} (schema {schema_of(args)})"


def open_store(args: argparse.Namespace, *, create: bool = False, **options: Any) -> Store:
    """The store the options name, not entered yet.

    A directory must exist unless ``create`` (entering the store creates it then); ``options``
    go to the store's constructor.

    Raises:
        StoreMissingError: the directory does not exist, or the URL cannot be used.
    """
    spec = store_spec(args)
    if is_postgres(spec):
        try:  # only a worker creates or migrates the schema
            return store_for(spec, schema=schema_of(args), create=create, **options)
        except ValueError as exc:  # a malformed URL (bad port, ...)
            raise StoreMissingError(f"{public_url(spec)}: {exc}") from None
    if not create and not os.path.isdir(spec):
        flag = "--root" if args.store is None else "--store"
        raise StoreMissingError(f"{spec}: no such directory (give the store's {flag})")
    return FileStore(spec, **options)


@asynccontextmanager
async def using(store: Store, *, write: bool) -> AsyncIterator[Store]:
    """Enter ``store`` for a command; a ``FileStore`` only when the command writes.

    Reading a directory store needs no setup, and entering one would create its folders and
    clean up leftovers: a command that only reads changes nothing. A PostgreSQL store is always
    entered (it opens its connections there).
    """
    if isinstance(store, FileStore) and not write:
        yield store
        return
    async with store:
        yield store


def store_failure(args: argparse.Namespace, exc: BaseException) -> str | None:
    """What to say when ``exc`` means the PostgreSQL store cannot be reached or used, else None."""
    if not uses_postgres(args):
        return None
    label = store_label(args)
    if isinstance(exc, ImportError) and exc.name == "asyncpg":
        return f"{label}: needs the asyncpg package (pip install 'tether[postgres]')"
    if isinstance(exc, StoreSchemaError):
        return str(exc)
    if isinstance(exc, OSError):  # refused, unknown host, timed out
        return f"cannot connect to {label}: {exc.strerror or str(exc) or type(exc).__name__}"
    try:
        import asyncpg
    except ImportError:  # pragma: no cover - asyncpg would have been imported to get here
        return None
    if isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError)):
        return f"{label}: {type(exc).__name__}: {exc}"
    return None


async def load_summary(store: Store, run_id: str) -> tuple[list[AnyEvent], RunSummary]:
    """A run's events (read without its lock or lease) and summary.

    Raises:
        RunNotFoundError, InvalidRunIdError, JournalCorruptError, JournalVersionError, OSError.
    """
    events = await store.read(run_id)
    return events, summarize(run_id, events, await holder_of(store, run_id))


async def load_summaries(store: Store) -> list[RunSummary]:
    """Every run of the store; a journal that cannot be read gives an unreadable summary, and so
    does an entry of a directory store's ``runs/`` named like a journal that is not a regular
    file (a directory, a FIFO...), so that nothing there hides the other runs.

    Raises:
        OSError: the store's directory cannot be listed.
    """
    out: list[RunSummary] = []
    for run_id in await store.list_runs():
        try:
            _, summary = await load_summary(store, run_id)
        except RunNotFoundError:
            continue  # removed since it was listed
        except (JournalError, InvalidRunIdError) as exc:
            summary = unreadable(run_id, str(exc))
        out.append(summary)
    if isinstance(store, FileStore):
        for name, kind in (await store.odd_entries()).items():
            if name.endswith(".journal"):
                path = os.path.join(store.runs_dir, name)
                reason = f"{path} is {kind}, not a regular file"
                out.append(unreadable(name.removesuffix(".journal"), reason))
        out.sort(key=lambda s: s.run_id)
    return out


# ---------------------------------------------------------------------------- running commands


def fail(message: str, code: int) -> int:
    print(f"tether: {message}", file=sys.stderr)
    return code


def execute(args: argparse.Namespace, command: Callable[[], Awaitable[int]]) -> int:
    """Run an async command; turn the errors every command shares into exit codes."""
    run_id = getattr(args, "run", None)
    check_store_usage(args)
    try:
        return anyio.run(command)
    except StoreMissingError as exc:
        return fail(str(exc), 3)
    except InvalidRunIdError as exc:
        return fail(str(exc), 2)
    except RunNotFoundError:
        return fail(f"no run {run_id!r} in {store_label(args)}", 1)
    except JournalLockedError:
        return fail(
            f"run {run_id!r} is busy in another process (a worker is advancing it); "
            "nothing was recorded; try again",
            1,
        )
    except (JournalCorruptError, JournalVersionError) as exc:
        return fail(f"{exc} (see `tether journal verify`)", 1)
    except JournalIOError as exc:  # the OS refused: a full disk, no permission, not a file
        return fail(str(exc), 3)
    except JournalBrokenError as exc:
        return fail(
            f"run {run_id!r}: writing failed ({exc.reason}); it may or may not have been recorded: "
            f"look with `tether show {store_flags(args)} {run_id}`",
            3,
        )
    except RunStateError as exc:
        return fail(f"refused: {exc}", 1)
    except BrokenPipeError:
        raise  # the reader went away (`| head`): not the store's doing, see ``cli.main``
    except Exception as exc:
        problem = store_failure(args, exc)
        if problem is not None:
            return fail(problem, 3)
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            return fail(f"{where}{exc.strerror or exc}", 3)
        raise
