"""The email agent: a three-step plan, killed right after the email went out.

The model's plan is ``search_notes`` -> ``summarise`` -> ``send_email``, then a final answer.
Process 1 runs it and is killed with ``SIGKILL`` right after ``send_email`` returned, before its
result was saved (``TETHER_CRASH_AT=tool_returned:3``: the third tool to return is
``send_email``). Process 2 resumes: the email's call dangles, its policy is ``idempotency_key``,
so it runs again with the same key and the mail service, which has seen the key, delivers
nothing. One email, four model calls. Without the key, the mail service delivers it twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..journal import Budgets
from ..models import Model, ScriptedModel
from ..tools import ToolContext, ToolRegistry
from ._harness import (
    Crash,
    DemoSummary,
    Hooks,
    Scenario,
    hooked_model_function,
    run_demo,
)
from ._services import Outbox

RUN_ID = "run-q3-report"
RECIPIENT = "dana@example.com"
OUTBOX = "outbox.jsonl"

PROMPT = f"Find my notes on the Q3 launch, summarise them and email the summary to {RECIPIENT}."
SYSTEM = "You are an assistant with access to the user's notes and their email."

NOTES = [
    "Q3 launch: beta opens to 40 design partners on 2 September.",
    "Q3 launch: pricing page and docs must ship a week before general availability.",
    "Q3 launch: general availability on 30 September if the beta has no blocking bugs.",
]


def script(messages: list[dict[str, Any]]) -> Any:
    """The model's plan, chosen from the conversation alone (so every process agrees).

    Each step passes the previous tool's result on, as a model would.
    """
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn == 0:
        return [ScriptedModel.tool_use("toolu_01", "search_notes", {"query": "Q3 launch"})]
    if turn == 1:
        notes = json.loads(_last_result(messages))
        text = "\n".join(notes)
        return [ScriptedModel.tool_use("toolu_02", "summarise", {"text": text})]
    if turn == 2:
        args = {"to": RECIPIENT, "subject": "Q3 launch: summary", "body": _last_result(messages)}
        return [ScriptedModel.tool_use("toolu_03", "send_email", args)]
    return "Report summarised and sent."


def _last_result(messages: list[dict[str, Any]]) -> str:
    for block in reversed(messages[-1].get("content") or []):
        if block.get("type") == "tool_result":
            return str(block.get("content", ""))
    return ""


def build(hooks: Hooks, idempotency: bool) -> tuple[Model, ToolRegistry]:
    """The model and the tools of one process."""
    outbox = Outbox(hooks.root / OUTBOX)
    tools = ToolRegistry()

    @tools.tool(policy="rerun")
    async def search_notes(query: str) -> list[str]:
        """Search the user's notes; returns the matching notes."""
        await hooks.show_progress()
        words = query.lower().split()
        return [n for n in NOTES if all(w in n.lower() for w in words)]

    @tools.tool(policy="rerun")
    async def summarise(text: str) -> str:
        """Summarise a text in a few lines."""
        await hooks.show_progress()
        points = [line.split(":", 1)[-1].strip() for line in text.splitlines() if line.strip()]
        return "Q3 launch summary:\n" + "\n".join(f"- {p}" for p in points)

    @tools.tool(policy="idempotency_key")
    async def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> dict[str, Any]:
        """Send an email."""
        await hooks.show_progress()
        key = ctx.idempotency_key if idempotency else None
        sent = await anyio.to_thread.run_sync(outbox.send, to, subject, body, key)
        if sent.duplicate:
            hooks.say(
                f"  mail: key {key} seen before, returned email #{sent.id}, delivered nothing"
            )
        else:
            with_key = f"key {key}" if key else "no idempotency key"
            hooks.say(f"  mail: delivered email #{sent.id} to {to} ({with_key})")
        return {"message_id": sent.id, "status": "sent"}

    model = ScriptedModel(hooked_model_function(hooks, script))
    return model, tools


def count_emails(root: Path) -> int:
    """Emails the mail service delivered."""
    return len(Outbox(root / OUTBOX).emails())


MAIL = Scenario(
    name="mail",
    run_id=RUN_ID,
    prompt=PROMPT,
    system=SYSTEM,
    budgets=Budgets(max_model_calls=10),
    effect_name="emails",
    effect_label=f"Emails {RECIPIENT} got",
    build=build,
    count_effects=count_emails,
)


def run_mail(
    root: str | Path,
    *,
    idempotency: bool = True,
    json_out: bool = False,
    stream: TextIO | None = None,
) -> DemoSummary:
    """Run the email demo in real child processes under ``root`` (new or empty).

    Prints the timeline (or, with ``json_out``, one JSON summary) to ``stream`` (stdout).

    Args:
        idempotency: ``send_email`` passes its idempotency key to the mail service.

    Raises:
        DemoError: ``root`` is not empty, or a process failed.
    """
    return run_demo(
        MAIL,
        root,
        idempotency=idempotency,
        crash=Crash(process=1, point="tool_returned", n=3),
        expected_effects=1 if idempotency else 2,
        json_out=json_out,
        stream=stream,
    )
