"""The email agent: a three-step plan, killed right after the email went out.

The model's plan is ``search_notes`` -> ``summarise`` -> ``send_email``, then a final answer.
Process 1 runs it and is killed with ``SIGKILL`` right after ``send_email`` returned, before its
result was saved (``TETHER_CRASH_AT=tool_returned:3``: the third tool to return is
``send_email``). Process 2 resumes: the email's call dangles, its policy is ``idempotency_key``,
so it runs again with the same key and the mail service, which has seen the key, delivers
nothing. One email, four model calls. Without the key, the mail service delivers it twice.

The agent is a crash-test scenario (``scenario``; ``tether crashtest examples.mail:scenario``
kills it at every crash point): the demo is that scenario, killed once, with its timeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..journal import Budgets
from ..models import Message, Model, ScriptedModel, blocks_of, is_known
from ..testing import Kill, Scenario
from ..tools import ToolContext, ToolRegistry
from ._demo import Demo, DemoSummary, run_demo, say
from ._services import Outbox, told

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


def script(messages: list[Message]) -> Any:
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


def _last_result(messages: list[Message]) -> str:
    for block in reversed(blocks_of(messages[-1])):
        if is_known(block) and block["type"] == "tool_result":
            return str(block.get("content", ""))
    return ""


def _scenario(root: Path, *, idempotency: bool) -> Scenario:
    """The run and its tools over the mail service under ``root``."""
    outbox = Outbox(root / OUTBOX)

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="rerun")
        async def search_notes(query: str) -> list[str]:
            """Search the user's notes; returns the matching notes."""
            words = query.lower().split()
            return [n for n in NOTES if all(w in n.lower() for w in words)]

        @tools.tool(policy="rerun")
        async def summarise(text: str) -> str:
            """Summarise a text in a few lines."""
            points = [line.split(":", 1)[-1].strip() for line in text.splitlines() if line.strip()]
            return "Q3 launch summary:\n" + "\n".join(f"- {p}" for p in points)

        @tools.tool(policy="idempotency_key")
        async def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> dict[str, Any]:
            """Send an email."""
            key = ctx.idempotency_key if idempotency else None
            sent = await anyio.to_thread.run_sync(outbox.send, to, subject, body, key)
            say(told("mail", "delivered", "email", to, sent, key))
            return {"message_id": sent.id, "status": "sent"}

        return ScriptedModel(script), tools

    def ledger() -> dict[str, int]:
        return {f"email to {RECIPIENT}": len(outbox.emails())}

    return Scenario(
        run_id=RUN_ID,
        prompt=PROMPT,
        system=SYSTEM,
        budgets=Budgets(max_model_calls=10),
        build=build,
        ledger=ledger,
    )


def scenario(root: Path) -> Scenario:
    """The Q3 report email (``tether crashtest`` runs it as ``examples.mail:scenario``)."""
    return _scenario(root, idempotency=True)


def scenario_without_key(root: Path) -> Scenario:
    """The same, with ``send_email`` leaving its idempotency key out: a resumed send repeats."""
    return _scenario(root, idempotency=False)


MAIL = Demo(
    name="mail",
    run_id=RUN_ID,
    scenario=scenario,
    without_key=scenario_without_key,
    effect_name="emails",
    effect_label=f"Emails {RECIPIENT} got",
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
        crash=Kill(process=1, point="tool_returned", n=3),
        expected_effects=1 if idempotency else 2,
        json_out=json_out,
        stream=stream,
    )
