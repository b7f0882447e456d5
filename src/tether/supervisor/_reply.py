"""What a model's reply decides before it is journaled: its stop reason, its call ids.

Both are decided in the answer's own group, so a crash between the answer and acting on it
replays the same decision.
"""

from __future__ import annotations

import logging
from typing import Any

from ..journal._records import Event, RunFinished, ToolResult
from ._state import RunState, RunStatus

log = logging.getLogger("tether.supervisor")


def act_on_stop(stop_reason: str | None, uses: list[dict[str, Any]]) -> list[Event]:
    """What an answer's stop reason decides at once, journaled in the answer's own group so a
    crash in between cannot split the two.

    ``tool_use``, ``end_turn``, ``stop_sequence`` (and no reason): the calls run; with none the
    run is done. ``max_tokens``: the answer was cut off, so its calls' inputs may be cut off too
    (an email sent with half its body): none of them runs, each gets an error result the model
    reads and the turn goes on; a text answer cut off ends the run ``done`` with a reason that
    says so. ``pause_turn``: nothing; the model is asked again with the paused turn as it is,
    and continues it. ``refusal``: the run fails, saying the model refused.
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
        reason = "the model refused to continue (stop_reason refusal)"
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


def unique_call_ids(message: dict[str, Any], state: RunState, run_id: str) -> None:
    """Give each call of ``message`` an id no earlier call of the run had (DESIGN invariant 10).

    A call's idempotency key is ``run_id:call_id``, so two calls with one id would share a key
    and a deduplicating service would drop the second. Models behind OpenAI-compatible servers
    and hand-written scripts often number calls per turn (``call_0`` every turn); such an id
    becomes ``call_0-t3`` (the turn's number), before the answer is journaled, so replay and the
    model's later requests see the new id, and its ``tool_result`` refers to it.
    """
    turn = state.model_calls + 1
    blocks = message["content"]
    here = {b["id"] for b in blocks if b.get("type") == "tool_use"}  # (not a copy of the run's)
    for block in blocks:
        if block.get("type") != "tool_use" or block["id"] not in state.call_ids:
            continue
        base, n = f"{block['id']}-t{turn}", 1
        new_id = base
        while new_id in here or new_id in state.call_ids:
            n += 1
            new_id = f"{base}-{n}"
        here.add(new_id)
        log.info(
            "run %s: the model reused call id %r; it is %r in this run",
            run_id,
            block["id"],
            new_id,
            extra={"run_id": run_id},
        )
        block["id"] = new_id
