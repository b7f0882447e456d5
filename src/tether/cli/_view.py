"""What the operator commands share: the options naming the store, and running a command.

``--root DIR`` or ``--store URL`` (with ``--schema``), opening and entering the store they
name, the messages that name it without a password, plain-text tables, and ``execute``, which
turns the errors every command shares into exit codes. What a run says (summaries, event
descriptions) and the answers a person gives live in ``tether.operate``, shared with the
console.
"""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio

from .._errors import (
    InvalidRunIdError,
    JournalBrokenError,
    JournalCorruptError,
    JournalIOError,
    JournalLockedError,
    JournalVersionError,
    RecordTooLargeError,
    RunNotFoundError,
    RunRecordsError,
    RunStateError,
    StoreSchemaError,
)
from .._store_url import is_postgres, store_for
from ..journal import FileStore, Store
from ..operate._display import printable, unfoldable
from ..postgres._admin import check_schema_name


def table(rows: list[list[str]]) -> list[str]:
    """Rows as plain, left-aligned columns (the last column is not padded), each cell fit for
    a terminal (``printable``: a reason or a note may hold escape sequences)."""
    if not rows:
        return []
    rows = [[printable(c) for c in r] for r in rows]
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
        try:
            spec.encode("utf-8")
        except UnicodeEncodeError:  # a shell's bytes that are not UTF-8: no host has them
            raise StoreMissingError(
                f"{public_url(spec)}: the URL holds bytes that are not UTF-8"
            ) from None
        if not create:  # a person at a terminal: say at once that the database is not there
            options.setdefault("start_wait", 0.0)
        try:  # only a worker creates or migrates the schema
            return store_for(spec, schema=schema_of(args), create=create, **options)
        except ValueError as exc:  # a malformed URL (bad port, ...)
            raise StoreMissingError(f"{public_url(spec)}: {exc}") from None
    flag = "--root" if args.store is None else "--store"
    try:
        there = _there(spec, "open the store", directory=True)
    except JournalIOError as exc:  # no permission to look (a parent's), say
        raise StoreMissingError(f"{spec}: cannot open the store: {exc.strerror}") from None
    if not there and os.path.lexists(spec):
        raise StoreMissingError(f"{spec}: not a directory (give the store's {flag})")
    if not create and not there:
        raise StoreMissingError(f"{spec}: no such directory (give the store's {flag})")
    return FileStore(spec, **options)


@asynccontextmanager
async def using(
    store: Store, *, write: bool, run: str | None = None, existing: bool = False
) -> AsyncIterator[Store]:
    """Enter ``store`` for a command; a ``FileStore`` only when the command writes.

    Reading a directory store needs no setup, and entering one would create its folders and
    clean up leftovers: a command that only reads changes nothing. A command that writes for
    ``run`` of a directory store finds the run first, so a directory that holds no such run
    (a mistyped ``--root``) is left as it was; so does one that needs an ``existing`` store
    (``tether gc``), in a directory that has no ``runs/``. A PostgreSQL store is always
    entered (it opens its connections there).

    Raises:
        RunNotFoundError: a directory store has no run ``run``.
        StoreMissingError: ``existing``, and the directory holds no store.
    """
    if (
        existing
        and isinstance(store, FileStore)
        and not await anyio.to_thread.run_sync(_there, store.runs_dir, "open the store", True)
    ):
        raise StoreMissingError(
            f"{store.root}: no tether store here (it has no runs/ directory); nothing "
            "was changed (give the store's --root)"
        )
    if isinstance(store, FileStore) and not write:
        yield store
        return
    here = store.location(run) if isinstance(store, FileStore) and run is not None else None
    if here is not None and not await anyio.to_thread.run_sync(_there, here, "look for the run"):
        raise RunNotFoundError(str(run))
    async with store:
        yield store


def _there(path: str, action: str, directory: bool = False) -> bool:
    """Whether ``path`` exists: as a directory (through a link to one) if ``directory``, else
    as anything (a link itself included).

    Raises:
        JournalIOError: the OS would not say (no permission to look, a file where a directory
            should be): never taken for "not there".
    """
    try:
        st = os.stat(path) if directory else os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise JournalIOError(path, action, exc) from exc
    return stat.S_ISDIR(st.st_mode) if directory else True


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


# ---------------------------------------------------------------------------- running commands


class ReportLost(Exception):
    """What a command did could not be written to standard output (a full disk, a closed
    terminal): it was done all the same (see ``report``)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def report(*lines: str) -> None:
    """Print what a command did, at once. It was done before this (an answer recorded, say),
    so a failure to write it out is raised as ``ReportLost``, which ``execute`` tells apart
    from a failure of the store.

    Raises:
        ReportLost: standard output refused the lines (a reader that went away is
            ``BrokenPipeError``, as everywhere).
    """
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise ReportLost(exc) from exc


def fail(message: str, code: int) -> int:
    """Say ``message`` on standard error (fit for a terminal: a refusal may quote a name or a
    reason another person gave, ``printable``) and return ``code``."""
    print(f"tether: {printable(message)}", file=sys.stderr)
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
    except RunRecordsError as exc:  # every frame checks, but the records make no run
        return fail(unfoldable(str(run_id), exc), 1)
    except RecordTooLargeError as exc:  # checked before anything is written or queued
        return fail(f"refused: run {run_id!r}: {exc.reason}; nothing was recorded", 1)
    except ReportLost as exc:  # done, and only the telling of it failed
        look = f"; see `tether show {store_flags(args)} {run_id}`" if run_id else ""
        return fail(
            f"done, but it could not be reported on standard output "
            f"({exc.cause.strerror or exc.cause}){look}",
            0,
        )
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
