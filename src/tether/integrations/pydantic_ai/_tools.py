"""A pydantic-ai agent's tools as tether tools, registered when a supervisor opens.

Every toolset of the agent (its function tools, MCP servers, any other toolset) is entered
when the supervisor opens its registry and left when it closes; each tool it lists is
registered from its own definition (name, description, JSON schema, pinned by runs like any
tool's) with the replay policy and options the application gave it (``ToolOptions``; a tool
without them is ``escalate``, as tether's own tools are). A tool pydantic-ai marks
approval-required (``requires_approval=True``) gets tether's approval gate.

A call runs the tool as pydantic-ai would, through its toolset's ``call_tool``, with its
arguments validated by the tool's own validator and a ``RunContext`` rebuilt from what is
the same in every process: the application's ``deps``, the agent's model, the call's id
(tether's) and name, ``tool_call_approved`` (tether's gate has already decided). What the
run's context holds that the journal does not (``messages``, ``usage``, ``retry``) is empty
there, as in the durable units of pydantic-ai's own integrations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from pydantic import ValidationError
from pydantic_ai import Agent, RunContext
from pydantic_ai.models import Model as AIModel
from pydantic_ai.models import infer_model
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage
from pydantic_core import to_jsonable_python

from ..._errors import ToolDefinitionError
from ...tools import ToolContext, ToolRegistry
from ...tools._adapters import ToolOptions
from .._steps import CONTINUE_TOOL


def agent_model(agent: Agent[Any, Any]) -> AIModel | None:
    """The agent's model as a ``Model`` object, or ``None`` when it has none."""
    model = agent.model
    if model is None:
        return None
    return model if isinstance(model, AIModel) else infer_model(model)


class AgentTools:
    """The ``ToolSource`` of one agent's tools (see the module's docstring)."""

    def __init__(
        self, agent: Agent[Any, Any], options: Mapping[str, ToolOptions], deps: Any
    ) -> None:
        self._agent = agent
        self._options = dict(options)
        self._deps = deps
        self._registered: list[str] = []

    def _context(self, **call: Any) -> RunContext[Any]:
        return RunContext(deps=self._deps, model=agent_model(self._agent), usage=RunUsage(), **call)  # type: ignore[arg-type]

    @asynccontextmanager
    async def opened(self, registry: ToolRegistry) -> AsyncIterator[None]:
        """Enter the agent's toolsets and register their tools (replacing this source's
        earlier ones); leave the toolsets on exit.

        Raises:
            ToolDefinitionError: a tool named like tether's own ``tether_continue``, or options
                for a tool the agent does not have.
        """
        async with AsyncExitStack() as stack:
            for name in self._registered:
                if name in registry:
                    registry.unregister(name)
            self._registered = []
            for toolset in self._agent.toolsets:
                await stack.enter_async_context(toolset)
                for name, tool in (await toolset.get_tools(self._context())).items():
                    self._register(registry, toolset, name, tool)
            unknown = sorted(set(self._options) - set(self._registered))
            if unknown:
                raise ToolDefinitionError(
                    unknown[0], "has options, but the agent has no tool by that name"
                )
            yield

    def _register(
        self, registry: ToolRegistry, toolset: AbstractToolset[Any], name: str, tool: Any
    ) -> None:
        if name == CONTINUE_TOOL:
            raise ToolDefinitionError(name, "is tether's own tool's name; rename the agent's")
        options = self._options.get(name, ToolOptions())
        definition = tool.tool_def
        validator = tool.args_validator

        def check(args: dict[str, Any]) -> str | None:
            try:
                validator.validate_python(args)
            except ValidationError as exc:
                return str(exc)
            return None

        async def call(args: dict[str, Any], ctx: ToolContext) -> Any:
            context = self._context(
                tool_call_id=ctx.call_id,
                tool_name=name,
                tool_call_approved=True,
                run_id=ctx.run_id,
            )
            result = await toolset.call_tool(name, validator.validate_python(args), context, tool)
            return to_jsonable_python(result)

        registry.register_schema(
            call,
            name=name,
            input_schema=definition.parameters_json_schema,
            description=definition.description or "",
            version=options.version,
            policy=options.own_policy(),
            verify=options.verify,
            approval=options.approval or definition.kind == "unapproved",
            approval_timeout=options.approval_timeout,
            on_approval_timeout=options.on_approval_timeout,
            timeout=options.timeout,
            retries=options.retries or 0,
            cache_control=options.cache_control,
            check_args=check,
        )
        self._registered.append(name)
