"""Registering tools: the decorator forms and the options they record."""

from __future__ import annotations

from typing import Any

from tether.tools import ApprovalTimeout, ReplayPolicy, ToolContext, ToolRegistry, ToolSpec


async def refund_landed(order_id: str, cents: int, ctx: ToolContext) -> dict[str, Any] | None:
    return None


def test_every_decorator_form_registers() -> None:
    tools = ToolRegistry()

    @tools.tool(policy="rerun")
    async def get_ticket(ticket_id: str) -> dict[str, Any]:
        return {"id": ticket_id}

    @tools.tool(policy="idempotency_key", approval=True)
    async def reply_to_customer(ticket_id: str, message: str, ctx: ToolContext) -> dict[str, Any]:
        return {}

    @tools.tool(policy="verify", verify=refund_landed)
    async def issue_refund(order_id: str, cents: int, ctx: ToolContext) -> dict[str, Any]:
        return {}

    @tools.tool()
    async def send_fax(number: str, text: str) -> dict[str, Any]:
        return {}

    @tools.tool
    async def ping() -> str:
        return "pong"

    @tools.tool(
        name="lookup",
        version="2",
        description="Look a customer up.",
        approval=True,
        approval_timeout=3600.0,
        on_approval_timeout="escalate",
    )
    async def find_customer(email: str) -> dict[str, Any]:
        return {}

    assert [spec.name for spec in tools] == [
        "get_ticket",
        "reply_to_customer",
        "issue_refund",
        "send_fax",
        "ping",
        "lookup",
    ]
    assert tools.get("get_ticket").policy is ReplayPolicy.RERUN
    reply = tools.get("reply_to_customer")
    assert reply.policy is ReplayPolicy.IDEMPOTENCY_KEY
    assert reply.approval is True
    assert reply.takes_ctx is True
    refund = tools.get("issue_refund")
    assert refund.policy is ReplayPolicy.VERIFY
    assert refund.verify is refund_landed
    assert tools.get("send_fax").policy is ReplayPolicy.ESCALATE
    assert tools.get("send_fax").takes_ctx is False
    assert tools.get("ping").policy is ReplayPolicy.ESCALATE

    lookup = tools.get("lookup")
    assert (lookup.name, lookup.version, lookup.description) == (
        "lookup",
        "2",
        "Look a customer up.",
    )
    assert lookup.fn is find_customer
    assert lookup.approval is True
    assert lookup.approval_timeout == 3600.0
    assert lookup.on_approval_timeout is ApprovalTimeout.ESCALATE
    assert "find_customer" not in tools


async def test_decorator_returns_the_function_unchanged() -> None:
    tools = ToolRegistry()

    async def ping() -> str:
        return "pong"

    async def echo(text: str) -> str:
        return text

    assert tools.tool(ping) is ping
    assert tools.tool(policy="rerun")(echo) is echo
    assert await ping() == "pong"
    assert await echo("hi") == "hi"


def test_defaults() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def ping() -> str:
        return "pong"

    spec = tools.get("ping")
    assert spec.version == "1"
    assert spec.description == ""
    assert spec.policy is ReplayPolicy.ESCALATE
    assert spec.approval is False
    assert spec.approval_timeout is None
    assert spec.on_approval_timeout is ApprovalTimeout.REJECT
    assert spec.verify is None


def test_approval_timeout_defaults_to_reject_and_accepts_enum_and_int() -> None:
    tools = ToolRegistry()

    @tools.tool(approval=True, approval_timeout=60)
    async def a() -> None:
        return None

    @tools.tool(approval=True, on_approval_timeout=ApprovalTimeout.ESCALATE)
    async def b() -> None:
        return None

    assert tools.get("a").on_approval_timeout is ApprovalTimeout.REJECT
    assert tools.get("a").approval_timeout == 60.0
    assert isinstance(tools.get("a").approval_timeout, float)
    assert tools.get("b").on_approval_timeout is ApprovalTimeout.ESCALATE


def test_policy_accepts_enum_members() -> None:
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.IDEMPOTENCY_KEY)
    async def send(to: str) -> None:
        return None

    assert tools.get("send").policy is ReplayPolicy.IDEMPOTENCY_KEY


def test_description_is_the_docstrings_first_paragraph() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def search(query: str) -> list[str]:
        """Search the knowledge base
        for articles.

        Args:
            query: words to look for.
        """
        return []

    assert tools.get("search").description == "Search the knowledge base for articles."


def test_explicit_description_wins_and_is_stripped() -> None:
    tools = ToolRegistry()

    @tools.tool(description="  Say hello.\n")
    async def hello() -> str:
        """Not this."""
        return "hello"

    assert tools.get("hello").description == "Say hello."


def test_register_returns_the_spec() -> None:
    tools = ToolRegistry()

    async def ping() -> str:
        return "pong"

    spec = tools.register(ping, name="ping2", policy="rerun")
    assert isinstance(spec, ToolSpec)
    assert tools.get("ping2") is spec


def test_bound_methods_can_be_tools() -> None:
    class Desk:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        async def greet(self, name: str) -> str:
            return self.prefix + name

    tools = ToolRegistry()
    tools.tool(Desk("hi ").greet)
    assert tools.get("greet").input_schema["required"] == ["name"]


def test_definition_leaves_out_an_empty_description() -> None:
    tools = ToolRegistry()

    @tools.tool
    async def ping() -> str:
        return "pong"

    @tools.tool
    async def pong() -> str:
        """Answer a ping."""
        return "ping"

    assert tools.get("ping").definition() == {
        "name": "ping",
        "input_schema": {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
    }
    assert tools.get("pong").definition()["description"] == "Answer a ping."


def test_registries_are_independent() -> None:
    first, second = ToolRegistry(), ToolRegistry()

    @first.tool
    async def ping() -> str:
        return "pong"

    assert "ping" in first
    assert "ping" not in second
    assert len(first) == 1
    assert len(second) == 0
