"""``TetherAgent``: a pydantic-ai ``Agent`` whose runs are tether runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from pydantic_ai import Agent
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.run import AgentRunResult

from ..._errors import RunStateError
from ...journal import Budgets
from ...models import Message, ModelReply, SystemPrompt, ToolDefinition
from ...supervisor import RunStatus, Supervisor, WorkerApp
from ...tools import ToolRegistry
from .._steps import ToolSettings, add_continue_tool, read_steps, tool_options
from ._step import FRAMEWORK, run_step
from ._tools import AgentTools, agent_model

OutputT = TypeVar("OutputT")


class AgentStepModel:
    """The tether ``Model`` of a pydantic-ai agent: each call takes the agent's next step.

    ``name`` is the agent's model (``openai:gpt-5-mini``, ``function:respond:``) and ``params``
    name the framework and the agent, so a run resumed by a deploy that changed the model
    stops as ``needs_attention`` naming the change; the tools' contracts are pinned as tools.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        deps: Any,
        event_stream_handler: EventStreamHandler[Any] | None = None,
    ) -> None:
        self._agent = agent
        self._deps = deps
        self._stream = event_stream_handler
        model = agent_model(agent)
        self._name = "none" if model is None else _model_name(model.system, model.model_name)
        self._params: dict[str, Any] = {"framework": FRAMEWORK, "agent": agent.name or ""}

    @property
    def name(self) -> str:
        return self._name

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        """Replay the agent's run from ``messages`` and return its next step (see
        ``tether.integrations``' steps). ``tools`` is not read: the agent offers its own.

        The step's request streams when the supervisor watches text (``on_text``) or there is
        an event stream handler (``TetherAgent``'s or the agent's own): they get that request's
        text and events as they arrive, never those of a response the journal answers.

        Raises:
            ModelError: as ``run_step`` says.
        """
        recorded = read_steps(FRAMEWORK, messages)
        replayed = await run_step(
            self._agent,
            recorded,
            deps=self._deps,
            instructions=_text(system),
            stream=self._stream,
        )
        return replayed.reply


def _text(system: SystemPrompt) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "\n\n".join(b.get("text", "") for b in system) or None


class TetherAgent(Generic[OutputT]):
    """A pydantic-ai ``Agent`` whose runs are tether runs: journaled, supervised, crash-safe.

    ``model`` and ``tools`` are what a ``Supervisor`` (or a ``WorkerApp`` for ``tether
    worker``) takes; every run of them is a run of the agent, with each model request and
    each tool call journaled intent before act, each tool under its replay policy
    (``tools={"name": {"policy": ...}}``; ``escalate`` by default), approvals at
    tether's gate, tether's budgets and pinned manifest.

    Args:
        agent: the agent, written as pydantic-ai's documentation writes it.
        tools: options for the agent's tools, by name: a mapping of ``tether.mcp.ToolOptions``
            fields (``{"refund": {"policy": "idempotency_key", "approval": True}}``).
        deps: the agent's dependencies, the same for every run of this process (clients,
            connections): a run resumes in any process, which builds its own.
        event_stream_handler: pydantic-ai's event stream handler, given the events of each
            step's real model request as they arrive (the agent's own when ``None``); the
            events of a response the journal answers are never given again.

    Raises:
        ToolDefinitionError: options that are not ``ToolOptions`` fields; (when a supervisor
            opens the tools) options for a tool the agent does not have, a tool named
            ``tether_continue``.
    """

    def __init__(
        self,
        agent: Agent[Any, OutputT],
        *,
        tools: Mapping[str, ToolSettings] | None = None,
        deps: Any = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
    ) -> None:
        self.agent = agent
        self.deps = deps
        self.model = AgentStepModel(agent, deps, event_stream_handler)
        self.tools = ToolRegistry()
        add_continue_tool(self.tools)
        self.tools.add_source(AgentTools(agent, tool_options(tools), deps))

    def worker_app(self, **options: Any) -> WorkerApp:
        """A ``WorkerApp`` for ``tether worker --app``; ``options`` go to the ``Supervisor``."""
        return WorkerApp(model=self.model, tools=self.tools, options=options)

    async def run(
        self,
        supervisor: Supervisor,
        run_id: str,
        user_prompt: str,
        *,
        budgets: Budgets | None = None,
    ) -> AgentRunResult[OutputT]:
        """Start run ``run_id`` of the agent, wait until it rests and return its result.

        The supervisor must have been made with this agent's ``model`` and ``tools``.

        Raises:
            RunExistsError: ``run_id`` names a run already.
            RunStateError: the run rested without finishing (waiting for a person, parked,
                failed, cancelled); its status and reason are in the message. Answer it and
                call ``result`` once it is done.
        """
        await supervisor.start(run_id, user_prompt, budgets=budgets)
        await supervisor.wait(run_id)
        return await self.result(supervisor, run_id)

    async def result(self, supervisor: Supervisor, run_id: str) -> AgentRunResult[OutputT]:
        """The result of finished run ``run_id``, as ``agent.run`` returns it.

        Replayed from the journal: the model is not asked and no tool runs.

        Raises:
            RunStateError: the run is not ``done``.
            ModelError: the journal no longer replays (the agent's code changed).
        """
        view = await supervisor.inspect(run_id)
        if view.status is not RunStatus.DONE:
            raise RunStateError(run_id, f"the run is {view.status.value}: {view.reason}")
        recorded = read_steps(FRAMEWORK, view.messages)
        replayed = await run_step(
            self.agent, recorded, deps=self.deps, instructions=None, ask=False
        )
        result: AgentRunResult[OutputT] = replayed.result
        return result


def _model_name(system: str, model_name: str) -> str:
    """``SYSTEM:MODEL`` (``openai:gpt-5-mini``), as pydantic-ai names models, from a model's
    ``system`` and ``model_name``; a name that starts with its system already (a
    ``FunctionModel``'s ``function:respond:``) is kept as it is."""
    return model_name if model_name.startswith(f"{system}:") else f"{system}:{model_name}"
