"""What a model's reply decides before it is journaled: its stop reason, its call ids, the
tool calls started in its group; and what a failed model call records.

All are decided in the answer's own group, so a crash between the answer and acting on it
replays the same decision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from .._backoff import MODEL_RETRY
from .._errors import ModelError, ModelResponseError, ToolArgumentsError
from ..journal import Event, ModelFailed, Parked, RunFinished, ToolResult, ToolStarted, Usage
from ..models import ContentBlock, Message, ToolUseBlock, blocks_of, is_known, tool_uses
from ._budgets import budget_problem
from ._replay import SAFE_TO_REPEAT
from ._resume import pinned_approval
from ._runtime import Runtime, spec_for
from ._state import RunState, RunStatus

MALFORMED_LIMIT = 3
"""Malformed answers in a row after which a run parks instead of asking the model again."""

log = logging.getLogger("tether.supervisor")


def act_on_stop(
    stop_reason: str | None,
    uses: list[ToolUseBlock],
    *,
    blocks: Sequence[ContentBlock] = (),
    stop_details: dict[str, Any] | None = None,
) -> list[Event]:
    """What an answer's stop reason decides at once, journaled in the answer's own group so a
    crash in between cannot split the two.

    ``tool_use``, ``end_turn``, ``stop_sequence`` (and no reason): the calls run; with none the
    run is done. ``max_tokens``: the answer was cut off, so its calls' inputs may be cut off too
    (an email sent with half its body): none of them runs, each gets an error result the model
    reads and the turn goes on; a text answer cut off ends the run ``done`` with a reason that
    says so. ``pause_turn``: nothing; the model is asked again with the paused turn as it is,
    and continues it. ``refusal``: the run fails, saying why (``refusal_reason``: the
    answer's ``blocks`` and ``stop_details``).
    ``model_context_window_exceeded``: the run fails, the conversation no longer fits.

    Otherwise a call whose block carries ``input_error`` (the model wrote arguments that are
    not a JSON object; see ``check_reply_blocks``) is not run either: it gets an error result
    that says why, so the model can send it again, while the turn's other calls run.
    """
    if stop_reason == "max_tokens":
        if uses:
            return [
                ToolResult(
                    call_id=b["id"],
                    ok=False,
                    content=f"not run: the answer was cut off by max_tokens while this call "
                    f"({b['name']}) was being written, so its input may be incomplete; ask for "
                    "it again in a shorter answer",
                )
                for b in uses
            ]
        reason = "the answer was cut off by max_tokens; its last text is incomplete"
        return [RunFinished(status=RunStatus.DONE.value, reason=reason)]
    if stop_reason == "pause_turn":
        return []
    if stop_reason == "refusal":
        reason = refusal_reason(blocks, stop_details)
        return [RunFinished(status=RunStatus.FAILED.value, reason=reason)]
    if stop_reason == "model_context_window_exceeded":
        reason = "the conversation no longer fits the model's context window"
        return [RunFinished(status=RunStatus.FAILED.value, reason=reason)]
    if not uses:
        return [RunFinished(status=RunStatus.DONE.value)]
    return [
        ToolResult(
            call_id=b["id"],
            ok=False,
            content=f"not run: the arguments of this call ({b['name']}) could not be read: "
            f"{b['input_error']}; send the call again with arguments that are one JSON object",
        )
        for b in uses
        if "input_error" in b
    ]


REFUSAL_QUOTED = 200
"""Characters of a refusal's words quoted in the reason of the run it failed."""

_FILTERED = (("finish_reason", "content_filter"), ("incomplete_reason", "content_filter"))
"""What ``stop_details`` holds when an OpenAI answer was stopped by the content filter (Chat
Completions' finish reason; the Responses API's reason an answer is incomplete)."""


def refusal_reason(blocks: Sequence[ContentBlock], stop_details: dict[str, Any] | None) -> str:
    """Why a run whose answer stopped with ``refusal`` failed, in the words the provider gave.

    An answer the content filter stopped says so (it is the provider's filter, not the model,
    that stopped it); a refusal says what the model said (an ``openai_refusal`` block's text)
    or what the provider said of it (the Messages API's ``stop_details``: its ``category`` and
    ``explanation``), quoted on one line and shortened; a refusal that says nothing is
    "the model refused to continue (stop_reason refusal)".
    """
    details = stop_details or {}
    for field, value in _FILTERED:
        if details.get(field) == value:
            return f"the provider's content filter stopped the answer ({field} {value})"
    words = [
        str(b.get("refusal", ""))
        for b in blocks
        if is_known(b) and b["type"] == "openai_refusal" and b.get("refusal")
    ]
    category, explanation = details.get("category"), details.get("explanation")
    if not words and isinstance(explanation, str) and explanation:
        words = [explanation]
    said = f"category {category}" if isinstance(category, str) and category else None
    if not words:
        return f"the model refused to continue ({said or 'stop_reason refusal'})"
    reason = "the model refused to continue" + (f" ({said})" if said else "")
    return f"{reason}: {_quoted(' '.join(words))}"


def _quoted(text: str) -> str:
    """``text`` on one line, cut to ``REFUSAL_QUOTED`` characters, as a JSON string (control
    characters escaped: a model's words reach an operator's terminal)."""
    flat = " ".join(text.split())
    if len(flat) > REFUSAL_QUOTED:
        flat = flat[: REFUSAL_QUOTED - 1] + "…"
    return json.dumps(flat, ensure_ascii=False)


SAFE_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The ids a call keeps as the model gave them: what the Anthropic API itself accepts, and
nothing that means anything in a path, a URL, an HTML attribute or a run id."""


def safe_call_ids(message: Message, state: RunState, run_id: str) -> None:
    """Give each call of ``message`` a safe id no earlier call of the run had (docs/design.md
    invariants 10 and 13), before the answer is journaled, so that replay, the model's later
    requests and every ``tool_result`` use the new id.

    A call id comes from the model, so it is untrusted: it becomes a path segment of the
    console's forms, a part of a child run's id and of an idempotency key. An id outside
    ``SAFE_CALL_ID`` (``functions.ask:0``, ``x/../../VICTIM/calls/toolu_b``, 10 KB of text) is
    renamed to its safe characters plus a digest of the whole (``functions_ask_0-1f2e3d4c``).

    A call's idempotency key is ``run_id:call_id``, so two calls with one id would share a key
    and a deduplicating service would drop the second. Models behind OpenAI-compatible servers
    and hand-written scripts often number calls per turn (``call_0`` every turn); such an id
    becomes ``call_0-t3`` (the turn's number).
    """
    turn = state.model_calls + 1
    uses = tool_uses(blocks_of(message))
    here = {b["id"] for b in uses}  # (not a copy of the run's)
    for block in uses:
        given = block["id"]
        new_id = given if SAFE_CALL_ID.fullmatch(given) else _renamed(given)
        if new_id in state.call_ids or (new_id != given and new_id in here):
            base, n = f"{new_id[:48]}-t{turn}", 1
            new_id = base
            while new_id in here or new_id in state.call_ids:
                n += 1
                new_id = f"{base}-{n}"
        if new_id == given:
            continue
        here.add(new_id)
        log.info(
            "run %s: the model's call id %r is %r in this run (%s)",
            run_id,
            given[:80],
            new_id,
            "used before" if SAFE_CALL_ID.fullmatch(given) else "not a safe id",
            extra={"run_id": run_id},
        )
        block["id"] = new_id


def _renamed(call_id: str) -> str:
    """``call_id``'s safe characters (the rest as ``_``) and a digest of all of it."""
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    kept = re.sub(r"[^A-Za-z0-9_-]", "_", call_id[:40]).strip("_") or "call"
    return f"{kept}-{digest}"


def starts_with_answer(state: RunState, rt: Runtime, uses: list[ToolUseBlock]) -> list[ToolStarted]:
    """The ``tool_started`` records to write in the same group as the model's answer.

    That saves one sync per call, and is done only where it changes nothing a person could
    tell: every call of the turn runs at once (a known tool, valid arguments, no approval,
    no timeout or retries of its own, within budget), each tool's policy makes running it
    again harmless (``rerun`` or ``idempotency_key``), and the supervisor is not stopping.
    If the process dies before such a call really ran, the resumed run finds it started
    without a result and runs it under that policy, as after any crash between a call's
    start and its result.
    """
    if rt.stopping.is_set():
        return []
    starts: list[ToolStarted] = []
    for block in uses:
        spec = spec_for(state, rt, block["name"])
        if (
            spec is None
            or spec.approval
            or pinned_approval(state, block["name"])
            or spec.policy not in SAFE_TO_REPEAT
            or spec.timeout is not None
            or spec.retries
        ):
            return []
        try:
            spec.validate(block.get("input"))
        except ToolArgumentsError:
            return []
        starts.append(ToolStarted(call_id=block["id"], name=block["name"], attempt=1))
    if len({s.call_id for s in starts}) != len(starts):
        return []  # a malformed turn: let the usual path deal with it
    if starts and budget_problem(state, rt.clock(), for_model=False, starting=len(starts)):
        return []
    return starts


def model_failed(state: RunState, rt: Runtime, run_id: str, exc: ModelError) -> list[Event]:
    """What to journal for a failed model call: ask again later, ask again now, or park."""
    usage = exc.usage if isinstance(exc.usage, Usage) else Usage()
    if isinstance(exc, ModelResponseError):
        row = state.malformed + 1  # malformed answers in a row, this one included
        if row >= MALFORMED_LIMIT:
            reason = f"the model's answer was malformed {row} times in a row; last: {exc.reason}"
            log.warning("run %s: the model's answer is malformed: %s", run_id, exc.reason)
            return [
                ModelFailed(kind="malformed", error=exc.reason, usage=usage),
                Parked(reason=reason, cause="model"),
            ]
        # Asked again after a pause, as after a transient failure: a proxy that answers with
        # an error page for a moment must not park the run within a second.
        pause = MODEL_RETRY.delay(row, rt.jitter)
        log.warning(
            "run %s: the model's answer is malformed (%s); asking again in %.1f s",
            run_id,
            exc.reason,
            pause,
            extra={"run_id": run_id},
        )
        return [
            ModelFailed(
                kind="malformed", error=exc.reason, retry_at=rt.clock() + pause, usage=usage
            )
        ]
    if exc.transient:
        delay = exc.retry_after
        if delay is None:
            delay = MODEL_RETRY.delay(state.model_failures + 1, rt.jitter)
        retry_at = rt.clock() + delay
        log.warning(
            "run %s: model call failed (%s); asking again in %.1f s",
            run_id,
            exc.reason,
            delay,
            extra={"run_id": run_id},
        )
        return [ModelFailed(kind="transient", error=exc.reason, retry_at=retry_at, usage=usage)]
    log.error("run %s: calling the model failed for good: %s", run_id, exc.reason)
    reason = f"calling model {exc.model!r} failed for good: {exc.reason}"
    return [Parked(reason=reason, cause="model")]
