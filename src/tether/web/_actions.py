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
    RunRecordsError,
    RunStateError,
)
from ..journal import Store
from ..journal._records import RESOLUTIONS
from ..operate import acknowledgement
from ..operate._deploy import fleet_of, repin_plan
from ..operate._display import retry_details, unfoldable
from ..supervisor import fold
from ..supervisor._verbs import Recorded

VERBS = ("approve", "reject", "resolve", "retry", "cancel", "signal", "repin")
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


def _text(params: Mapping[str, Any], key: str, default: str = "") -> str:
    value = params.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ActionError(400, "bad_request", f"{key} must be a string")
    return value


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
    ``name``, ``data`` and ``id`` (signal), ``worker`` (repin: to that live worker's
    contracts).

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
    except RunRecordsError as exc:  # every frame checks, but the records make no run
        raise ActionError(500, "unreadable", unfoldable(run_id, exc)) from None
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
        done = await operate.decide(
            store,
            run_id,
            call_id,
            approved=verb == "approve",
            by=by,
            note=_text(params, "note"),
        )
    elif verb == "resolve":
        assert call_id is not None
        outcome = _text(params, "outcome")
        if outcome not in RESOLUTIONS:
            raise ActionError(400, "bad_request", "outcome must be succeeded, retry or failed")
        done = await operate.resolve(
            store,
            run_id,
            call_id,
            outcome=outcome,
            result=params.get("result"),
            by=by,
            note=_text(params, "note"),
        )
    elif verb == "retry":
        extend = params.get("extend") or {}
        if not isinstance(extend, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in extend.values()
        ):
            raise ActionError(400, "bad_request", "extend maps budget names to numbers")
        fractional = [k for k, v in extend.items() if k != "deadline_s" and v != int(v)]
        if fractional:
            raise ActionError(
                400, "bad_request", f"extend: {fractional[0]} counts whole calls or tokens"
            )
        extend = {k: v if k == "deadline_s" else int(v) for k, v in extend.items()}
        done = await operate.retry(
            store, run_id, by=by, note=_text(params, "note"), extend=list(extend.items())
        )
    elif verb == "repin":
        done = await _repin(store, run_id, _text(params, "worker"), _text(params, "note"), by)
    elif verb == "cancel":
        reason = _text(params, "reason", "cancelled") or "cancelled"
        done = await operate.cancel(store, run_id, reason=reason, by=by)
    else:
        done = await operate.signal(
            store,
            run_id,
            _text(params, "name"),
            params.get("data"),
            signal_id=_text(params, "id") or None,
            by=by,
        )
    queued = done.queued or done.pending  # (a repeated signal may still wait in the inbox)
    message = "; ".join([acknowledgement(run_id, done), *retry_details(done)])
    return Answered(message, queued=queued, repeated=done.repeated)


async def _repin(store: Store, run_id: str, worker: str, note: str, by: str) -> Recorded:
    """Move the run to the contracts live worker ``worker`` advertises, as ``by`` accepts."""
    contracts = (await fleet_of(store)).get(worker)
    if contracts is None:
        raise ActionError(409, "refused", f"refused: no live worker {worker!r} in this store")
    state = fold(await store.read(run_id))
    pins, model = repin_plan(state, contracts)
    if not pins and model is None:  # (another person's click was recorded first, say)
        who = f" (repinned by {state.repinned_by})" if state.repinned is not None else ""
        raise ActionError(
            409,
            "refused",
            f"refused: run {run_id!r}: nothing to repin: the run is on the contracts of "
            f"worker {worker!r} already{who}",
        )
    return await operate.repin(store, run_id, tools=pins, model=model, by=by, note=note)
