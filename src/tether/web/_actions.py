"""The console's answers: the operator commands' verbs, with their refusals as HTTP errors.

Each verb calls ``tether.operate`` (the implementation ``tether approve`` and the others use),
with ``by`` set to the signed-in identity, never to a name the request carries. A refusal is
the same sentence the command line prints (``refused: run 'r1': call 'c1' was already approved
by priya``), raised as ``ActionError`` with the HTTP status that fits it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import operate
from .._errors import (
    InvalidRunIdError,
    JournalBrokenError,
    JournalCorruptError,
    JournalIOError,
    JournalLockedError,
    JournalVersionError,
    RunNotFoundError,
    RunStateError,
)
from ..journal._protocols import Store
from ..operate._answer import OUTCOMES
from ..operate._describe import as_json, call_text, shorten
from ..supervisor._answers import Recorded

VERBS = ("approve", "reject", "resolve", "retry", "cancel", "signal")
CALL_VERBS = ("approve", "reject", "resolve")


class ActionError(Exception):
    """An answer that was not recorded: ``status`` (HTTP), ``error`` (a short code), ``message``."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


@dataclass(frozen=True)
class Answered:
    """What an answer did: ``message`` says it as the command line would; ``queued``: it waits
    in the run's inbox for the process that holds the run; ``repeated``: a signal the run had
    already, acknowledged and not recorded again."""

    message: str
    queued: bool = False
    repeated: bool = False


def _answered(message: str, done: Recorded) -> Answered:
    return Answered(message, queued=done.queued, repeated=done.repeated)


def _text(params: Mapping[str, Any], key: str, default: str = "") -> str:
    value = params.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ActionError(400, "bad_request", f"{key} must be a string")
    return value


def _where(done: Recorded) -> str:
    if done.queued:
        return "(queued: a worker is advancing the run and records it at its next pause)"
    return f"(seq {done.record.seq})"


async def act(
    store: Store,
    verb: str,
    run_id: str,
    call_id: str | None,
    params: Mapping[str, Any],
    *,
    by: str,
) -> Answered:
    """Record ``verb`` for run ``run_id`` (and call ``call_id``) as ``by``; say what was done.

    ``params``: ``note`` (approve, reject, resolve, retry), ``outcome`` and ``result``
    (resolve; any JSON value), ``extend`` (retry: budget name to amount), ``reason`` (cancel),
    ``name``, ``data`` and ``id`` (signal).

    Raises:
        ActionError: nothing was recorded (or, status 503 with ``broken``, it is unknown).
    """
    try:
        return await _act(store, verb, run_id, call_id, params, by)
    except ActionError:
        raise
    except InvalidRunIdError as exc:
        raise ActionError(400, "bad_request", str(exc)) from None
    except RunNotFoundError:
        raise ActionError(404, "not_found", f"no run {run_id!r}") from None
    except RunStateError as exc:
        raise ActionError(409, "refused", f"refused: {exc}") from None
    except JournalLockedError:
        raise ActionError(
            409,
            "busy",
            f"run {run_id!r} is busy in another process (a worker is advancing it); nothing "
            "was recorded; try again",
        ) from None
    except (JournalCorruptError, JournalVersionError) as exc:
        raise ActionError(500, "unreadable", f"{exc} (see `tether journal verify`)") from None
    except JournalBrokenError as exc:
        raise ActionError(
            503,
            "broken",
            f"run {run_id!r}: writing failed ({exc.reason}); it may or may not have been "
            "recorded: look at the run again",
        ) from None
    except JournalIOError as exc:
        raise ActionError(503, "store_failed", str(exc)) from None
    except ValueError as exc:
        raise ActionError(400, "bad_request", str(exc)) from None


async def _act(
    store: Store,
    verb: str,
    run_id: str,
    call_id: str | None,
    params: Mapping[str, Any],
    by: str,
) -> Answered:
    if verb not in VERBS:
        raise ActionError(404, "not_found", f"no such action: {verb}")
    if (verb in CALL_VERBS) != (call_id is not None):
        raise ActionError(
            404, "not_found", f"{verb} applies to a {'call' if call_id is None else 'run'}"
        )
    if not store.entered:
        raise ActionError(503, "store_closed", "the console's store is not open for writing")
    if verb in ("approve", "reject"):
        assert call_id is not None
        note = _text(params, "note")
        done = await operate.decide(
            store, run_id, call_id, approved=verb == "approve", by=by, note=note
        )
        what = call_text(done.state.calls[call_id].name, done.state.calls[call_id].input, 60)
        extra = f" ({shorten(note, 80)})" if note else ""
        done_verb = "approved" if verb == "approve" else "rejected"
        said = (
            f"recorded: {done_verb} {call_id} {what} of run {run_id} by {by}{extra} {_where(done)}"
        )
        return _answered(said, done)
    if verb == "resolve":
        assert call_id is not None
        outcome = _text(params, "outcome")
        if outcome not in OUTCOMES:
            raise ActionError(400, "bad_request", "outcome must be succeeded, retry or failed")
        result = params.get("result")
        note = _text(params, "note")
        done = await operate.resolve(
            store, run_id, call_id, outcome=outcome, result=result, by=by, note=note
        )
        what = call_text(done.state.calls[call_id].name, done.state.calls[call_id].input, 60)
        extra = f", result {shorten(as_json(result), 80)}" if result is not None else ""
        return _answered(
            f"recorded: resolved {call_id} {what} of run {run_id} as {outcome}{extra} by {by} "
            f"{_where(done)}",
            done,
        )
    if verb == "retry":
        extend = params.get("extend") or {}
        if not isinstance(extend, Mapping) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in extend.values()
        ):
            raise ActionError(400, "bad_request", "extend maps budget names to numbers")
        done = await operate.retry(
            store, run_id, by=by, note=_text(params, "note"), extend=list(extend.items())
        )
        return _answered(f"recorded: retry of run {run_id} by {by} {_where(done)}", done)
    if verb == "cancel":
        reason = _text(params, "reason", "cancelled") or "cancelled"
        done = await operate.cancel(store, run_id, reason=f"{reason} (by {by})")
        return _answered(
            f"recorded: run {run_id} cancelled ({reason}) by {by} {_where(done)}", done
        )
    name = _text(params, "name")
    signal_id = _text(params, "id") or None
    done = await operate.signal(store, run_id, name, params.get("data"), signal_id=signal_id, by=by)
    record_id = getattr(done.record, "signal_id", "")
    if done.repeated:
        return _answered(
            f"already recorded: signal {name} ({record_id}) to run {run_id}; "
            "delivered again, it counts once",
            done,
        )
    return _answered(
        f"recorded: signal {name} ({record_id}) to run {run_id} by {by} {_where(done)}", done
    )
