"""A framework's agent run as a tether run: supervised, listed, shown, answered in the console.

Each framework's example agent (``examples/pydantic_ai_agent.py``, written pydantic-ai's way on
its ``FunctionModel``; ``examples/openai_agents_app.py``, the Agents SDK's way against the strict
fake of the Responses API) runs under a ``Supervisor`` until it waits for its two refunds'
approvals; ``tether runs`` and ``tether show`` list it with its tool calls; the console's API
approves both; a supervisor finishes the run, each refund made once, and the framework's own
result (``AgentRunResult``, ``RunResult``) is replayed from the journal without a request.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest

import tether
import tether.web
from examples.openai_agents_app import durable_runner
from examples.pydantic_ai_agent import PROMPT, durable_agent
from tether.cli import main

from .._plain import plain

TOKEN = "priya-token-0123456789abcdef"
FRAMEWORKS: dict[str, Callable[[pathlib.Path], Any]] = {
    "pydantic_ai": durable_agent,
    "openai_agents": durable_runner,
}
REQUESTS = {"pydantic_ai": 3, "openai_agents": 4}


def lines(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def _until_approvals(framework: str, root: pathlib.Path) -> tuple[str, ...]:
    app = FRAMEWORKS[framework](root)
    store = tether.FileStore(root / "store")
    async with tether.Supervisor(
        store, model=app.model, tools=app.tools, sweep_interval=None
    ) as sup:
        await sup.start("run-1", PROMPT)
        assert await sup.wait("run-1") is tether.RunStatus.WAITING_FOR_APPROVAL
        return (await sup.inspect("run-1")).pending


async def _approve_in_the_console(root: pathlib.Path, pending: tuple[str, ...]) -> None:
    async with tether.FileStore(root / "store") as console_store:
        application = tether.web.app(console_store, tokens={TOKEN: "priya"})
        transport = httpx2.ASGITransport(app=application)
        async with httpx2.AsyncClient(transport=transport, base_url="http://console.test") as c:
            headers = {"authorization": f"Bearer {TOKEN}"}
            page = await c.get("/api/runs/run-1", headers=headers)
            assert page.status_code == 200
            assert "lookup_order" in json.dumps(page.json())
            for call in pending:
                answer = await c.post(
                    f"/api/runs/run-1/calls/{call}/approve", json={"note": "ok"}, headers=headers
                )
                assert answer.status_code == 200, answer.text
                assert "recorded: approved" in answer.json()["message"]


async def _finish(framework: str, root: pathlib.Path) -> tuple[Any, Any, int]:
    app = FRAMEWORKS[framework](root)  # as a fresh process would build it
    store = tether.FileStore(root / "store")
    async with tether.Supervisor(
        store, model=app.model, tools=app.tools, sweep_interval=None
    ) as sup:
        assert await sup.wait("run-1") is tether.RunStatus.DONE
        view = await sup.inspect("run-1")
        requests = len(lines(root / "requests.log"))
        return view, await app.result(sup, "run-1"), requests


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_run_is_supervised_listed_shown_and_answered_in_the_console(
    framework: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = anyio.run(_until_approvals, framework, tmp_path)
    assert len(pending) == 2
    assert lines(tmp_path / "payments.jsonl") == []

    assert main(["runs", "--root", str(tmp_path / "store")]) == 0
    listed = capsys.readouterr().out
    assert "run-1" in listed
    assert "waiting_for_approval" in listed
    assert "refund" in listed
    assert main(["show", "--root", str(tmp_path / "store"), "run-1"]) == 0
    shown = capsys.readouterr().out
    assert 'asks for lookup_order(order="A-1")' in shown
    assert 'ok: {"order":"A-2","total":45.5}' in shown
    assert 'asks for refund(order="A-1", amount=30.0)' in shown

    anyio.run(_approve_in_the_console, tmp_path, pending)
    view, result, requests = anyio.run(_finish, framework, tmp_path)
    assert view.final_text == "Refunded A-1 and A-2 in full."
    output = result.output if framework == "pydantic_ai" else result.final_output
    assert output == "Refunded A-1 and A-2 in full."
    assert requests == REQUESTS[framework]
    assert len(lines(tmp_path / "requests.log")) == requests  # the result asked nothing
    refunds = [json.loads(line)["order"] for line in lines(tmp_path / "payments.jsonl")]
    assert sorted(refunds) == ["A-1", "A-2"]
    assert view.tool_calls == 4 + (framework == "openai_agents")  # the handoff is a call


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
async def test_a_rejected_refund_reaches_the_agent_and_nothing_is_paid(
    framework: str, tmp_path: pathlib.Path
) -> None:
    app = FRAMEWORKS[framework](tmp_path)
    store = tether.FileStore(tmp_path / "store")
    async with tether.Supervisor(
        store, model=app.model, tools=app.tools, sweep_interval=None
    ) as sup:
        await sup.start("run-1", PROMPT)
        await sup.wait("run-1")
        for call in (await sup.inspect("run-1")).pending:
            await sup.decide("run-1", call, approved=False, by="priya", note="not returned yet")
        assert await sup.wait("run-1") is tether.RunStatus.DONE
        view = await sup.inspect("run-1")
    assert lines(tmp_path / "payments.jsonl") == []
    results = [
        b["content"]
        for m in plain(view.messages)
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("is_error")
    ]
    assert any("not returned yet" in r for r in results)


def test_an_unsupported_framework_version_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    from tether.integrations._versions import FrameworkVersionError, require

    monkeypatch.setattr(metadata, "version", lambda name: "3.1.0")
    with pytest.raises(FrameworkVersionError) as caught:
        require("pydantic-ai-slim", "tether.integrations.pydantic_ai", minimum="2.68", below="3")
    assert "pydantic-ai-slim >=2.68,<3; 3.1.0 is installed" in str(caught.value)
    assert "tether[pydantic-ai]" in str(caught.value)

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(ImportError, match=r"openai-agents .*not installed"):
        require("openai-agents", "tether.integrations.openai_agents", minimum="0.24", below="0.25")


def test_the_agents_still_run_without_tether(tmp_path: pathlib.Path) -> None:
    """Outside a tether run, the wrapped agents are the framework's as before."""
    from agents import Runner

    runner = durable_runner(tmp_path)
    result = anyio.run(
        lambda: Runner.run(
            runner.agent, "hello", context=runner.context, run_config=runner.run_config
        )
    )
    assert result.last_agent.name == "refunds"
    assert [i.name for i in result.interruptions] == ["refund", "refund"]  # the SDK's own gate
    assert lines(tmp_path / "payments.jsonl") == []


def test_a_pydantic_ai_model_is_pinned_by_its_own_name() -> None:
    """pydantic-ai names a ``FunctionModel`` ``function:NAME:``; the run pins that name, not
    its system twice (``function:function:NAME:``)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tether.integrations.pydantic_ai._agent import AgentStepModel

    def respond(messages: list[Any], info: AgentInfo) -> Any:
        raise AssertionError("not called")

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    assert AgentStepModel(agent, None).name == "function:respond:"


async def test_a_framework_tool_given_only_a_verify_function_is_verified() -> None:
    """As ``ToolOptions`` says: ``verify=`` implies policy ``verify`` for a tool nothing else
    says anything of (it raised "only used with policy 'verify', not 'escalate'")."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tether.integrations.pydantic_ai._tools import AgentTools
    from tether.mcp import ToolOptions

    def respond(messages: list[Any], info: AgentInfo) -> Any:
        raise AssertionError("not called")

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    async def landed(arguments: dict[str, Any], ctx: tether.ToolContext) -> Any:
        return None

    options = {"refund": ToolOptions(verify=landed), "other": ToolOptions()}
    assert options["other"].own_policy() == "escalate"
    registry = tether.ToolRegistry()
    async with AgentTools(agent, {"refund": options["refund"]}, None).opened(registry):
        assert registry.get("refund").policy == "verify"
