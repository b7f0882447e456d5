"""Shared helpers for the supervisor tests: journals crafted by hand, waits with deadlines."""

from __future__ import annotations

import os
import pathlib
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any, TypeVar

import anyio

import tether
from tether.journal import (
    AnyEvent,
    BlobRef,
    Budgets,
    Event,
    ModelResponse,
    RunStarted,
    Store,
    ToolResult,
    ToolStarted,
)
from tether.models import (
    ContentBlock,
    Message,
    Model,
    ModelReply,
    SystemPrompt,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    is_known,
)
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._loop import Runtime, build_manifest

from ._ledger_app import script as delivery_script

_E = TypeVar("_E")

WAIT = 10.0
"""Upper bound for any single wait in these tests; a healthy run takes milliseconds."""

STORE_ENV = "TETHER_TEST_STORE"
"""Set to ``URL#SCHEMA`` for a test's child process to serve that PostgreSQL schema."""


def child_store(root: pathlib.Path) -> Store:
    """The store a test's child process serves: the PostgreSQL schema ``TETHER_TEST_STORE``
    names (leases of 0.5 s, so that a later process takes over a killed one's runs quickly),
    or a ``FileStore`` in ``root/store``."""
    spec = os.environ.get(STORE_ENV)
    if not spec:
        return tether.FileStore(root / "store")
    from tether.postgres import PostgresStore

    url, _, schema = spec.partition("#")
    return PostgresStore(url, schema=schema, lease_ttl=0.5)


async def _no_blob(ref: BlobRef) -> Any:
    raise AssertionError(f"unexpected blob {ref.digest}")


def manifest_for(model: Model, tools: tether.ToolRegistry, *, system: SystemPrompt = None) -> Any:
    """The manifest a Supervisor with ``model`` and ``tools`` would pin for a new run."""
    rt = Runtime(model=model, tools=tools, load_blob=_no_blob)
    return build_manifest(rt, system=system, app_version="")


async def craft(
    root: pathlib.Path,
    run_id: str,
    events: Sequence[Event],
) -> None:
    """Create run ``run_id`` under ``root`` holding ``events`` (one group each) and close it."""
    async with tether.FileStore(root) as store:
        journal = await store.create(run_id)
        async with journal:
            for event in events:
                await journal.append([event])


async def craft_dangling(
    root: pathlib.Path,
    run_id: str,
    *,
    model: Model,
    tools: tether.ToolRegistry,
    block: ToolUseBlock,
    prompt: str = "help",
    system: SystemPrompt = None,
    budgets: Budgets | None = None,
    attempts: int = 1,
) -> None:
    """A run whose model asked for ``block`` and whose call was started but has no result.

    This is what the journal holds after a process died while the tool ran.
    """
    started = RunStarted(
        run_id=run_id,
        manifest=manifest_for(model, tools, system=system),
        messages=[{"role": "user", "content": prompt}],
        budgets=budgets or Budgets(),
    )
    response = ModelResponse(message={"role": "assistant", "content": [block]})
    starts = [
        ToolStarted(call_id=block["id"], name=block["name"], attempt=n)
        for n in range(1, attempts + 1)
    ]
    await craft(root, run_id, [started, response, *starts])


async def read_events(root: pathlib.Path, run_id: str) -> list[AnyEvent]:
    """Every durable event of a run, read without its lock."""
    async with tether.FileStore(root) as store:
        return await store.read(run_id)


async def wait_for(
    sup: Supervisor, run_id: str, want: RunStatus, timeout: float = WAIT
) -> RunStatus:
    """Wait until the run rests at ``want`` (waits through other resting statuses too)."""
    with anyio.fail_after(timeout):
        while True:
            status = await sup.wait(run_id, timeout=timeout)
            if status is want:
                return status
            if status.final:
                view = await sup.inspect(run_id)
                raise AssertionError(f"run ended {status} ({view.reason}), wanted {want}")
            await anyio.sleep(0.01)


def of_type(events: Sequence[AnyEvent], kind: type[_E]) -> list[_E]:
    return [e for e in events if isinstance(e, kind)]


def tool_results(message: Message) -> list[ToolResultBlock]:
    """The ``tool_result`` blocks of a user message."""
    content = message.get("content")
    assert isinstance(content, list), message
    return [b for b in content if is_known(b) and b["type"] == "tool_result"]


def results_by_id(messages: Sequence[Message]) -> dict[str, ToolResultBlock]:
    """Every ``tool_result`` block of the conversation, by ``tool_use_id``."""
    out: dict[str, ToolResultBlock] = {}
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            for block in tool_results(message):
                out[block["tool_use_id"]] = block
    return out


def result_of(events: Sequence[AnyEvent], call_id: str) -> ToolResult:
    found = [e for e in events if isinstance(e, ToolResult) and e.call_id == call_id]
    assert len(found) == 1, found
    return found[0]


class RecordingModel:
    """Wraps a model and keeps every request it was sent (same name and params)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.requests: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def params(self) -> dict[str, Any]:
        return self.inner.params

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        self.requests.append({"system": system, "messages": messages, "tools": tools})
        return await self.inner(system=system, messages=messages, tools=tools)


def delivery_app(ledger: Counter[str]) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    """A lookup (rerun), then a delivery counted in ``ledger`` by idempotency key, then text."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(item: str) -> str:
        """Look an item up."""
        await anyio.sleep(random.uniform(0, 0.01))
        return f"{item} found"

    @tools.tool(policy="idempotency_key")
    async def deliver(item: str, ctx: tether.ToolContext) -> dict[str, Any]:
        """Deliver an item."""
        await anyio.sleep(random.uniform(0, 0.01))
        ledger[ctx.idempotency_key] += 1
        return {"ok": True}

    return tether.ScriptedModel(delivery_script), tools


def gated_tools(sent: list[str], gate: anyio.Event) -> tether.ToolRegistry:
    """``slow_lookup`` (waits for ``gate``) and ``send`` (needs approval; keys go to ``sent``)."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def slow_lookup(item: str) -> str:
        """Look an item up, slowly."""
        await gate.wait()
        return f"{item} found"

    @tools.tool(policy="idempotency_key", approval=True)
    async def send(text: str, ctx: tether.ToolContext) -> str:
        """Send a text."""
        sent.append(ctx.idempotency_key)
        return "sent"

    return tools


def lookup_and_send_model() -> tether.ScriptedModel:
    """Asks for ``slow_lookup`` and ``send`` in one turn, then answers "done"."""
    both: list[ContentBlock] = [
        tether.ScriptedModel.tool_use("toolu_1", "slow_lookup", {"item": "a"}),
        tether.ScriptedModel.tool_use("toolu_2", "send", {"text": "hi"}),
    ]
    return tether.ScriptedModel([both, "done"])
