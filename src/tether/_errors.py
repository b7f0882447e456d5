"""Every error tether raises, under one root.

::

    TetherError
    ├── InvalidRunIdError (ValueError)   a run id that could be a path, or is empty/too long
    ├── RunExistsError                   creating a run whose journal already exists
    ├── RunNotFoundError (LookupError)   opening or reading a run that does not exist
    ├── BlobError                        a blob is missing, or its bytes do not match its digest
    ├── RunStateError (ValueError)       an action the run's current state does not allow
    ├── NoSuchCaseError (ValueError)     a benchmark case pattern that matches no case
    ├── ModelError                       a model call failed (``transient`` says if retrying helps)
    │   └── ModelResponseError           the model's answer is malformed (what and where)
    ├── ToolError                        a problem with a tool's definition or a call to it
    │   ├── ToolDefinitionError          a tool that cannot be registered (bad signature, policy)
    │   ├── UnknownToolError             a call names a tool (or version) the registry lacks
    │   ├── ToolArgumentsError           a call's arguments do not match the tool's schema
    │   ├── OutcomeUnknownError          an attempt ended with no result: it may have had its effect
    │   └── ToolUnavailableError         the tool's service could not be reached: nothing was sent
    ├── StoreSchemaError                 the database's schema is newer, or cannot be set up
    ├── StoreUnavailableError            the database could not be reached within the wait
    └── JournalError                     anything about one journal file (or a run's inbox)
        ├── JournalCorruptError          damage followed by valid data (path, offset, seq, reason)
        ├── JournalVersionError          written by a newer format than this reader knows
        ├── JournalLockedError           another handle (task or process) holds the write lock
        │   └── LeaseLostError           PostgreSQL: the run's lease was lost
        ├── JournalBrokenError           a write or fsync failed: this handle accepts no more
        │   └── JournalRemovedError      the file was removed or replaced while held
        ├── JournalIOError               a file could not be created, read or written (the OS error)
        ├── JournalClosedError           the handle was closed
        └── RecordTooLargeError (ValueError)  one encoded event exceeds the frame limit

Errors carry what a person needs to act on them as attributes, and survive pickling
(``__reduce__``) so they cross process boundaries intact.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .journal import Usage
    from .tools import ToolContext


SHOWN = 64
"""The most characters of a value from outside (an id, a name) a message repeats."""


def quoted(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` for a message: a longer string is cut to its first ``limit`` characters,
    followed by how long it was, so that a megabyte sent as an id is not sent back whole."""
    if not isinstance(value, str) or len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} characters)"


class TetherError(Exception):
    """Root of every error raised by tether."""


class InvalidRunIdError(TetherError, ValueError):
    """A run id that is empty, too long, or holds characters other than letters, digits, ``._-``."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"invalid run id {quoted(run_id)}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.reason))


class RunExistsError(TetherError):
    """A run with this id already exists in the store."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} already exists")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id,))


class RunNotFoundError(TetherError, LookupError):
    """No run with this id exists in the store."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} not found")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id,))


class BlobError(TetherError):
    """A referenced blob is missing or does not match its content address."""

    def __init__(self, digest: str, reason: str) -> None:
        self.digest = digest
        self.reason = reason
        super().__init__(f"blob {digest}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.digest, self.reason))


class JournalError(TetherError):
    """A problem with one journal file, named by ``path``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, str(self).removeprefix(f"{self.path}: ")))


class JournalCorruptError(JournalError):
    """The journal is damaged somewhere other than its unfinished tail.

    Damage is *corruption* (not a torn tail) when valid data written later follows it, or when
    it is in the header, or when a checksummed record breaks the format's rules (a gap or
    duplicate in ``seq``, a foreign run id). Nothing is changed on disk; ``tether journal repair``
    moves the damaged part aside when a person asks.

    Attributes:
        offset: byte offset of the first damaged frame or group.
        seq: the sequence number expected at that point (``None`` for header damage).
        reason: what is wrong, in words.
    """

    def __init__(self, path: str, offset: int, seq: int | None, reason: str) -> None:
        self.offset = offset
        self.seq = seq
        self.reason = reason
        at = f"offset {offset}" + ("" if seq is None else f" (seq {seq})")
        JournalError.__init__(self, path, f"corrupt at {at}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.offset, self.seq, self.reason))


class JournalVersionError(JournalError):
    """The journal was written by a newer format version than this reader supports."""

    def __init__(self, path: str, version: int, supported: int) -> None:
        self.version = version
        self.supported = supported
        JournalError.__init__(
            self,
            path,
            f"format version {version} is newer than this tether supports ({supported}); "
            "upgrade tether to read it",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.version, self.supported))


class JournalLockedError(JournalError):
    """Another handle, in this process or another one, holds the journal's write lock."""

    def __init__(self, path: str) -> None:
        JournalError.__init__(self, path, "locked by another writer (task or process)")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path,))


class LeaseLostError(JournalLockedError):
    """This handle may no longer act for the run: another worker took it over (this handle's
    lease, its epoch, is stale), or the lease ran out before it was renewed (the process was
    paused, or cut off from the database). ``detail`` says which.

    Raised by an append the store rejected (the epoch check is in the same statement as the
    insert) and by ``fence`` before a tool runs. Nothing more is written through this handle;
    the worker stops working on the run, which the next worker to claim it resumes.
    """

    def __init__(self, path: str, detail: str = "") -> None:
        JournalError.__init__(self, path, "lease lost" + (f": {detail}" if detail else ""))
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.detail))


class StoreSchemaError(TetherError):
    """The database's tether schema is newer than this tether, or cannot be set up."""


class StoreUnavailableError(TetherError):
    """The store's database could not be reached while the store waited for it to open.

    Attributes:
        store: the database (without credentials) and schema.
        waited: seconds waited.
        reason: why the last try failed, in words (the error itself is ``__cause__``).
    """

    def __init__(self, store: str, waited: float, reason: str) -> None:
        self.store = store
        self.waited = waited
        self.reason = reason
        super().__init__(f"{store}: still unreachable after waiting {waited:.0f} s: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.store, self.waited, self.reason))


def _cause_text(exc: BaseException) -> str:
    """An error in words for a message: ``[Errno 28] No space left on device`` for an
    ``OSError`` (without its file name, which the message names already), else its type and
    text."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"
    if isinstance(exc, JournalBrokenError):
        return exc.reason
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class JournalBrokenError(JournalError):
    """A write or fsync failed; this handle refuses further appends (fsync is never retried).

    Reopen the journal to re-read what really reached the disk.

    Attributes:
        reason: the error behind it, in words (``[Errno 28] No space left on device``); also
            in the message, so that a log line names the root cause.
    """

    def __init__(self, path: str, cause: BaseException | str | None = None) -> None:
        if cause is None:
            self.reason = "a write or fsync failed"
        else:
            self.reason = cause if isinstance(cause, str) else _cause_text(cause)
        JournalError.__init__(
            self, path, f"journal handle is broken: {self.reason}; reopen the journal to recover"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class JournalRemovedError(JournalBrokenError):
    """The journal's file was removed (or another file put in its place) while a handle held it.

    Nothing more is written through the handle: its writes would go to a file nobody can open
    again, and a new run created under the same id meanwhile is another file.
    """

    def __init__(self, path: str) -> None:
        self.reason = "journal was removed or replaced while held"
        JournalError.__init__(
            self, path, f"{self.reason}; nothing more is written through this handle"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path,))


class JournalIOError(JournalError):
    """A run's file could not be created, read or written: the OS refused (disk full, no
    permission, not a regular file...). Nothing was acknowledged.

    Attributes:
        action: what was being done (``create the run``, ``read``, ``queue an answer``).
        errno: the OS error number (``errno.ENOSPC``...), or ``None``.
        strerror: the OS error's text (``No space left on device``).
    """

    def __init__(self, path: str, action: str, cause: OSError) -> None:
        self.action = action
        self.errno = cause.errno
        self.strerror = cause.strerror or str(cause)
        JournalError.__init__(self, path, f"cannot {action}: {_cause_text(cause)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.action, OSError(self.errno, self.strerror)))


class JournalClosedError(JournalError):
    """The journal handle was closed."""

    def __init__(self, path: str) -> None:
        JournalError.__init__(self, path, "journal handle is closed")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path,))


class RecordTooLargeError(JournalError, ValueError):
    """One encoded event is larger than a frame may hold."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        self.reason = f"an encoded event of {size} bytes exceeds the {limit}-byte frame limit"
        JournalError.__init__(self, path, self.reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.size, self.limit))


class ModelError(TetherError):
    """A model call failed.

    Attributes:
        model: the model's name.
        reason: what went wrong, in words (status, error type and message for an API error).
        transient: whether asking again later may work (overloaded, rate-limited, a server
            error, a dropped connection, a timeout). The runtime retries these within the run,
            with backoff; any other model error parks the run as ``needs_attention`` for a
            person to fix the cause and ``retry`` it.
        retry_after: seconds the server asked the client to wait (``retry-after``), if any.
        usage: the tokens the failed call consumed, where known (a ``tether.journal.Usage``).
    """

    def __init__(
        self,
        model: str,
        reason: str,
        *,
        transient: bool = False,
        retry_after: float | None = None,
        usage: Usage | None = None,
    ) -> None:
        self.model = model
        self.reason = reason
        self.transient = transient
        self.retry_after = retry_after
        self.usage = usage
        super().__init__(f"model {model!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_model_error,
            (type(self), self.model, self.reason, self.transient, self.retry_after, self.usage),
        )


def _rebuild_model_error(
    cls: type[ModelError],
    model: str,
    reason: str,
    transient: bool,
    retry_after: float | None,
    usage: Usage | None,
) -> ModelError:
    return cls(model, reason, transient=transient, retry_after=retry_after, usage=usage)


class ModelResponseError(ModelError):
    """The model answered with something tether cannot use; ``reason`` names what and where.

    The runtime asks again a bounded number of times, then parks the run.
    """


class ToolError(TetherError):
    """A problem with a tool, named by ``tool``."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"tool {tool!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tool, self.reason))


class ToolDefinitionError(ToolError):
    """A tool cannot be registered as written (signature, policy or version problem)."""


class UnknownToolError(ToolError):
    """A call names a tool, or a version of one, that the registry does not hold."""


class ToolArgumentsError(ToolError):
    """A call's arguments do not match the tool's input schema."""


class OutcomeUnknownError(ToolError):
    """An attempt ended without a result and may have had its effect (a connection lost mid-call).

    A tool raises it when it cannot tell whether what it asked for happened. The runtime treats
    the attempt like one whose process died: its outcome is unknown, and the tool's replay
    policy decides what comes next (run again, verify, escalate), while ``retries`` are left
    (see ``ToolRegistry.tool``). It never becomes an error result on its own.
    """


class ToolUnavailableError(ToolError):
    """The tool could not reach what it calls (a server that is down), and nothing was sent.

    ``attempt`` binds the error to one attempt of one call: the ``ToolContext`` of the
    attempt that sent nothing. Only a bound error is taken as proof: the attempt is journaled
    as never sent (``tool_failed`` with ``unsent``), and the run rests and tries the call
    again (about 1 s doubling to 60 s), whatever its policy and ``retry_on``, for as long as
    the service stays down: an outage is not the run's fault, so it never becomes the call's
    error result, and spends neither the tool's ``retries`` nor the run's ``max_tool_calls``.
    A tool of your own passes its own context (``raise ToolUnavailableError(name, why,
    attempt=ctx)``) only when nothing of this attempt left the process.

    Unbound (no ``attempt``, or another attempt's context: an error that propagated from a
    call the tool made, ``MCPServer.call`` inside a composite tool that may already have had
    an effect), it is an ordinary exception: a failure to retry if the tool lists it in
    ``retry_on``, else the call's error result. The tools tether registers for an MCP
    server bind it themselves, when no session can be had for their own call: only while
    the runtime runs an attempt of that very tool, never when another tool invokes them
    with its own context (``tools.get(name).invoke(args, ctx)`` in a composite tool).

    ``attempt`` is the ``ToolContext`` itself (``attempt=ctx``); anything else but ``None``
    (``attempt=ctx.attempt``, the attempt's number) raises ``TypeError``. Pickled or copied,
    the error keeps it.
    """

    def __init__(self, tool: str, reason: str, *, attempt: ToolContext | None = None) -> None:
        if attempt is not None and not _is_tool_context(attempt):
            # (``attempt=ctx.attempt``, an int, would be taken silently as unbound: the
            # outage would reach the model instead of being waited for)
            raise TypeError(
                "ToolUnavailableError(attempt=...) takes the attempt's ToolContext (ctx) or "
                f"None, not {type(attempt).__name__}"
            )
        super().__init__(tool, reason)
        self.attempt = attempt
        """The attempt that sent nothing, or ``None``: not known to be this attempt's."""

    def __reduce__(self) -> tuple[Any, ...]:
        # (the attempt it is bound to is kept: a copy or an error sent across processes
        # still proves that attempt sent nothing)
        return (*super().__reduce__(), {"attempt": self.attempt})


def _is_tool_context(value: object) -> bool:
    """Whether ``value`` is a ``tether.tools.ToolContext``, without importing that package
    here (this module imports none): a context exists only once its module was loaded."""
    module = sys.modules.get("tether.tools._context")
    return module is not None and isinstance(value, module.ToolContext)


class RunStateError(TetherError, ValueError):
    """An action the run's current state does not allow (deciding a call nobody asked about)."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.reason))


class RunRecordsError(TetherError, ValueError):
    """A run's journal is intact (every frame checks) but its records do not make a run: one
    is out of order, or refers to a tool call the run never made. Such a journal was written by
    something other than a run's supervisor; nothing is recorded for the run while it stays so
    (``tether journal dump`` shows its records; ``repair`` mends only damaged bytes).

    Attributes:
        seq: the sequence number of the first record that does not fit.
        reason: what is wrong, in words.
    """

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        self.reason = reason
        super().__init__(f"record {seq}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.seq, self.reason))


class NoSuchCaseError(TetherError, ValueError):
    """A pattern naming benchmark cases (``tether bench --cases``) matches none of them.

    ``pattern`` is the pattern, ``keys`` every case there is to choose from.
    """

    def __init__(self, pattern: str, keys: Sequence[str]) -> None:
        self.pattern = pattern
        self.keys = list(keys)
        super().__init__(f"no case matches {pattern!r}; the cases are: {', '.join(self.keys)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.pattern, self.keys))
