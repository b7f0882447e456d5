"""``TetherRunner``: ``Runner.run`` for agents whose runs are tether runs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from agents import Agent, FunctionTool, Handoff, Model, RunConfig, RunResult
from agents.models.multi_provider import MultiProvider
from agents.run import DEFAULT_MAX_TURNS
from agents.tool_context import ToolContext as AgentsToolContext
from pydantic_core import to_jsonable_python

from ..._errors import RunStateError, ToolDefinitionError
from ...journal import Budgets
from ...models import Message, ModelReply, SystemPrompt, ToolDefinition
from ...supervisor import RunStatus, Supervisor, WorkerApp
from ...tools import ToolContext, ToolRegistry
from ...tools._adapters import ToolOptions
from .._steps import CONTINUE_TOOL, ToolSettings, add_continue_tool, read_steps, tool_options
from ._step import FRAMEWORK, StepModel, replayed_guardrail, replayed_tool, run_step

_call: ContextVar[ToolContext | None] = ContextVar("tether_agents_call", default=None)


def idempotency_key() -> str:
    """The idempotency key of the tool call running now: ``RUN_ID:CALL_ID``, the same on every
    attempt and in every process (pass it to a service that deduplicates).

    Raises:
        RuntimeError: no tool call of a tether run is running in this task.
    """
    ctx = _call.get()
    if ctx is None:
        raise RuntimeError("idempotency_key() is called only inside a tool run by tether")
    return ctx.idempotency_key


def _graph(start: Agent[Any], more: Sequence[Agent[Any]]) -> Iterator[Agent[Any]]:
    """Every agent reachable from ``start`` by handoffs given as agents, then ``more``."""
    seen: set[int] = set()
    todo: list[Agent[Any]] = [start, *more]
    while todo:
        agent = todo.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        todo.extend(h for h in agent.handoffs if isinstance(h, Agent))


class AgentsStepModel:
    """The tether ``Model`` of an agent graph: each call takes the run's next step."""

    def __init__(self, runner: TetherRunner) -> None:
        self._runner = runner

    @property
    def name(self) -> str:
        return f"{FRAMEWORK}:{self._runner.agent.name}"

    @property
    def params(self) -> dict[str, Any]:
        return {"framework": FRAMEWORK, "agents": sorted(a.name for a in self._runner.agents)}

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        """Replay the run from ``messages`` and return its next step (``system`` and ``tools``
        are not read: the agents have their own).

        Raises:
            ModelError: as ``run_step`` says.
        """
        runner = self._runner
        replayed = await run_step(
            runner.agent,
            read_steps(FRAMEWORK, messages),
            context=runner.context,
            run_config=runner.run_config,
            max_turns=runner.max_turns,
        )
        return replayed.reply


class TetherRunner:
    """Runs an Agents SDK agent (and the agents it hands off to) as tether runs.

    ``model`` and ``tools`` are what a ``Supervisor`` (or ``worker_app()`` for ``tether
    worker``) takes; ``await runner.run(agent, input, supervisor=sup, run_id=...)`` is
    ``Runner.run(agent, input)`` with the run durable. Each model request and tool call is
    journaled intent before act; each function tool is a tether tool under its replay policy
    (``tools={"name": {"policy": ...}}``; ``escalate`` by default); a tool with
    ``needs_approval`` waits at tether's gate; handoffs are calls of their own, journaled;
    input guardrails' outcomes are journaled once.

    The agents are changed in place, once: their models and function tools answer from the
    journal inside a tether run and act as before outside one.

    Args:
        agent: the starting agent.
        tools: options for the function tools, by name (``tether.mcp.ToolOptions`` fields).
        agents: agents reachable only through ``Handoff`` objects (those given as agents are
            found).
        context: the run context object the tools receive (``ctx.context``), the same for
            every run of this process.
        run_config: as for ``Runner.run`` (its ``model_provider`` resolves model names).
        max_turns: as for ``Runner.run``.

    Raises:
        ToolDefinitionError: two different function tools by one name, a tool named
            ``tether_continue``, options for a tool no agent has, or bad options.
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        tools: Mapping[str, ToolSettings] | None = None,
        agents: Sequence[Agent[Any]] = (),
        context: Any = None,
        run_config: RunConfig | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        self.agent = agent
        self.context = context
        self.run_config = run_config
        self.max_turns = max_turns
        self.agents = list(_graph(agent, agents))
        self.model = AgentsStepModel(self)
        self.tools = ToolRegistry()
        add_continue_tool(self.tools)
        options = tool_options(tools)
        provider = run_config.model_provider if run_config is not None else MultiProvider()
        originals: dict[str, FunctionTool] = {}
        for each in self.agents:
            if not isinstance(each.model, StepModel):
                real = (
                    each.model if isinstance(each.model, Model) else provider.get_model(each.model)
                )
                each.model = StepModel(real)
            replaced: list[Any] = []
            for tool in each.tools:
                if isinstance(tool, FunctionTool):
                    original = originals.get(tool.name)
                    if original is not None and original is not tool:
                        raise ToolDefinitionError(tool.name, "two different tools have this name")
                    originals[tool.name] = tool
                    tool = replayed_tool(tool)
                replaced.append(tool)
            each.tools = replaced
            each.input_guardrails = [replayed_guardrail(g) for g in each.input_guardrails]
            for handoff in each.handoffs:
                self._add_handoff(handoff)
        for name, tool in originals.items():
            self._add_tool(tool, options.get(name, ToolOptions()))
        unknown = sorted(set(options) - set(originals))
        if unknown:
            raise ToolDefinitionError(
                unknown[0], "has options, but no agent has a tool by that name"
            )

    def _add_tool(self, tool: FunctionTool, options: ToolOptions) -> None:
        if tool.name == CONTINUE_TOOL:
            raise ToolDefinitionError(tool.name, "is tether's own tool's name; rename the agent's")
        context = self

        async def call(args: dict[str, Any], ctx: ToolContext) -> Any:
            text = json.dumps(args)
            token = _call.set(ctx)
            try:
                agents_ctx = AgentsToolContext(
                    context.context,
                    tool_name=tool.name,
                    tool_call_id=ctx.call_id,
                    tool_arguments=text,
                )
                out = await tool.on_invoke_tool(agents_ctx, text)
            finally:
                _call.reset(token)
            return out if isinstance(out, str) else to_jsonable_python(out, fallback=str)

        self.tools.register_schema(
            call,
            name=tool.name,
            input_schema=tool.params_json_schema,
            description=tool.description,
            version=options.version,
            policy=options.own_policy(),
            verify=options.verify,
            approval=options.approval or tool.needs_approval is not False,
            approval_timeout=options.approval_timeout,
            on_approval_timeout=options.on_approval_timeout,
            timeout=options.timeout,
            retries=options.retries or 0,
            cache_control=options.cache_control,
        )

    def _add_handoff(self, handoff: Agent[Any] | Handoff[Any, Any]) -> None:
        if isinstance(handoff, Agent):
            from agents import handoff as make_handoff

            handoff = make_handoff(handoff)
        if handoff.tool_name in self.tools:
            return
        target = handoff.agent_name

        async def transfer(args: dict[str, Any], ctx: ToolContext) -> dict[str, str]:
            return {"assistant": target}

        self.tools.register_schema(
            transfer,
            name=handoff.tool_name,
            input_schema=handoff.input_json_schema or {"type": "object", "properties": {}},
            description=handoff.tool_description,
            policy="rerun",
        )

    def worker_app(self, **options: Any) -> WorkerApp:
        """A ``WorkerApp`` for ``tether worker --app``; ``options`` go to the ``Supervisor``."""
        return WorkerApp(model=self.model, tools=self.tools, options=options)

    async def run(
        self,
        starting_agent: Agent[Any],
        input: str,
        *,
        supervisor: Supervisor,
        run_id: str,
        budgets: Budgets | None = None,
    ) -> RunResult:
        """``Runner.run(starting_agent, input)`` as run ``run_id``: start it, wait until it
        rests, and return its result.

        Raises:
            ValueError: ``starting_agent`` is not this runner's agent.
            RunExistsError: ``run_id`` names a run already.
            RunStateError: the run rested without finishing (waiting for a person, parked,
                failed, cancelled); answer it and call ``result`` once it is done.
        """
        if starting_agent is not self.agent:
            raise ValueError(
                f"this runner runs agent {self.agent.name!r}, not {starting_agent.name!r}"
            )
        await supervisor.start(run_id, input, budgets=budgets)
        await supervisor.wait(run_id)
        return await self.result(supervisor, run_id)

    async def result(self, supervisor: Supervisor, run_id: str) -> RunResult:
        """The ``RunResult`` of finished run ``run_id``, replayed from the journal (no model
        request, no tool run; output guardrails run again).

        Raises:
            RunStateError: the run is not ``done``.
            ModelError: the journal no longer replays (the agents' code changed).
        """
        view = await supervisor.inspect(run_id)
        if view.status is not RunStatus.DONE:
            raise RunStateError(run_id, f"the run is {view.status.value}: {view.reason}")
        replayed = await run_step(
            self.agent,
            read_steps(FRAMEWORK, view.messages),
            context=self.context,
            run_config=self.run_config,
            max_turns=self.max_turns,
            ask=False,
        )
        result: RunResult = replayed.result
        return result
