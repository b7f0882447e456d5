"""The Kitebase support agent: ticket KITE-142, an approval, a kill right after the reply.

The agent looks ticket KITE-142 up, finds the fix in the help center and replies to Northwind
Studio. A reply reaches a customer, so priya, the support lead, approves it first. The run:

1. Process 1 starts run-kite-142. The model asks for ``get_ticket``, ``search_help`` and then
   ``reply_to_customer`` (call ``toolu_03``), which needs approval: the run parks and the
   process exits. Nothing waits in memory.
2. priya's decision is appended to the run's journal.
3. Process 2 resumes the run, sends the reply through the help desk with the idempotency key
   ``run-kite-142:toolu_03`` and is killed with ``SIGKILL`` right after the send returns,
   before its result is saved (``TETHER_CRASH_AT=tool_returned:1``).
4. Process 3 resumes. The reply's call dangles (started, no result); its policy is
   ``idempotency_key``, so it runs again with the same key, and the help desk, which has seen
   the key, sends nothing. The model writes its final answer.

Northwind Studio gets one reply, and the model is called four times across three processes.
Without the key the help desk cannot tell the second send from a new reply: two replies. If
priya rejects the reply, nothing is sent and the model's last message says why.

The agent is a crash-test scenario (``scenario``; ``tether crashtest examples.kitebase:scenario``
kills it at every crash point): the demo is that scenario, killed once, with its timeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..journal import Budgets, Decision
from ..models import Message, Model, ScriptedModel
from ..testing import Kill, Pending, Scenario
from ..tools import ToolContext, ToolRegistry
from ._demo import Demo, DemoSummary, run_demo, say
from ._services import HelpDesk, told

RUN_ID = "run-kite-142"
TICKET_ID = "KITE-142"
CUSTOMER = "Northwind Studio"
APPROVER = "priya"
REPLY_CALL = "toolu_03"
REJECT_NOTE = "Loop in their IT admin first."
HELPDESK_DB = "helpdesk.db"

PROMPT = (
    "Ticket KITE-142 just came in. Look it up, find the fix in the help center and reply "
    "to the customer."
)
SYSTEM = (
    "You are the Kitebase support agent. Look tickets up, find fixes in the help center and "
    "reply to customers. A support lead approves every reply before it is sent."
)

TICKET: dict[str, Any] = {
    "id": TICKET_ID,
    "title": "Customer locked out after SSO change",
    "customer": CUSTOMER,
    "contact": "ops@northwind.example",
    "body": "We switched our SSO provider this morning and now nobody on our team can sign "
    "in: every attempt says 'account not linked'.",
}

HELP_ARTICLE = (
    "[account-recovery#2] Locked out of your account after an SSO change: an admin re-links "
    "the workspace under Settings > Security > Single sign-on > Re-link provider. Members "
    "then sign in again with the new provider."
)

REPLY = (
    "Hi Northwind Studio team, sorry about the lockout. After an SSO provider change the "
    "workspace has to be re-linked once: an admin opens Settings > Security > Single sign-on "
    "and chooses Re-link provider. Everyone can then sign in with the new provider. "
    "- Kitebase Support"
)


def script(messages: list[Message]) -> Any:
    """The model's answers, chosen from the conversation alone (so every process agrees).

    Answer ``i`` is given when the conversation holds ``i`` assistant messages. The last one
    reads the reply's tool result: sent, or refused with the reason the model then passes on.
    """
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn == 0:
        return [
            ScriptedModel.text("Let me look the ticket up."),
            ScriptedModel.tool_use("toolu_01", "get_ticket", {"ticket_id": TICKET_ID}),
        ]
    if turn == 1:
        query = "locked out after SSO change"
        return [ScriptedModel.tool_use("toolu_02", "search_help", {"query": query})]
    if turn == 2:
        args = {"ticket_id": TICKET_ID, "message": REPLY}
        return [ScriptedModel.tool_use(REPLY_CALL, "reply_to_customer", args)]
    result = _last_tool_result(messages)
    if result.get("is_error"):
        return (
            f"Nothing was sent to {CUSTOMER} on {TICKET_ID}: {result.get('content')} "
            "The draft stays on the ticket until that is done."
        )
    reply_id = json.loads(result.get("content") or "{}").get("reply_id")
    return (
        f"Replied to {CUSTOMER} on {TICKET_ID} with the steps to re-link their SSO provider "
        f"(help desk reply #{reply_id})."
    )


def _last_tool_result(messages: list[Message]) -> dict[str, Any]:
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for block in reversed(content):
                if block.get("type") == "tool_result":
                    return dict(block)
    return {}


def _scenario(root: Path, *, idempotency: bool) -> Scenario:
    """The run, its tools over the help desk under ``root``, and priya approving the reply."""
    helpdesk = HelpDesk(root / HELPDESK_DB)

    def build() -> tuple[Model, ToolRegistry]:
        tools = ToolRegistry()

        @tools.tool(policy="rerun")
        async def get_ticket(ticket_id: str) -> dict[str, Any]:
            """Fetch a support ticket by its id."""
            if ticket_id != TICKET_ID:
                raise LookupError(f"no ticket {ticket_id}")
            return dict(TICKET)

        @tools.tool(policy="rerun")
        async def search_help(query: str) -> str:
            """Search the help center; returns the best matching article section."""
            return HELP_ARTICLE

        @tools.tool(policy="idempotency_key", approval=True)
        async def reply_to_customer(
            ticket_id: str, message: str, ctx: ToolContext
        ) -> dict[str, Any]:
            """Send a reply to the ticket's customer. A support lead approves it first."""
            key = ctx.idempotency_key if idempotency else None
            sent = await anyio.to_thread.run_sync(
                helpdesk.send_reply, ticket_id, CUSTOMER, message, key
            )
            say(told("help desk", "sent", "reply", CUSTOMER, sent, key))
            return {"reply_id": sent.id, "status": "sent"}

        return ScriptedModel(script), tools

    def ledger() -> dict[str, int]:
        return {f"reply to {CUSTOMER} on {TICKET_ID}": helpdesk.count(TICKET_ID)}

    def decide(pending: Pending) -> Decision | None:
        return None if pending.escalated else pending.approve(by=APPROVER)

    return Scenario(
        run_id=RUN_ID,
        prompt=PROMPT,
        system=SYSTEM,
        budgets=Budgets(max_model_calls=10),
        build=build,
        ledger=ledger,
        decide=decide,
    )


def scenario(root: Path) -> Scenario:
    """Ticket KITE-142, with the reply approved by priya (``tether crashtest`` runs it as
    ``examples.kitebase:scenario``)."""
    return _scenario(root, idempotency=True)


def scenario_without_key(root: Path) -> Scenario:
    """The same, with the reply tool leaving its idempotency key out: a resumed send repeats."""
    return _scenario(root, idempotency=False)


KITEBASE = Demo(
    name="kitebase",
    run_id=RUN_ID,
    scenario=scenario,
    without_key=scenario_without_key,
    effect_name="replies",
    effect_label=f"Replies {CUSTOMER} got on {TICKET_ID}",
)


def run_kitebase(
    root: str | Path,
    *,
    idempotency: bool = True,
    reject: bool = False,
    json_out: bool = False,
    stream: TextIO | None = None,
) -> DemoSummary:
    """Run the Kitebase demo in real child processes under ``root`` (new or empty).

    Prints the timeline (or, with ``json_out``, one JSON summary) to ``stream`` (stdout).

    Args:
        idempotency: the reply tool passes its idempotency key to the help desk.
        reject: priya rejects the reply (note "Loop in their IT admin first."). Nothing is
            sent, so no process is killed: there is no send to be killed after.

    Raises:
        DemoError: ``root`` is not empty, or a process failed.
    """
    decide = Decision(
        call_id=REPLY_CALL,
        approved=not reject,
        by=APPROVER,
        note=REJECT_NOTE if reject else "",
    )
    return run_demo(
        KITEBASE,
        root,
        idempotency=idempotency,
        decide=decide,
        crash=None if reject else Kill(process=2, point="tool_returned", n=1),
        expected_effects=0 if reject else (1 if idempotency else 2),
        json_out=json_out,
        stream=stream,
    )
