"""``MCPServer``: one MCP server's tools as durable tools, over one session per process.

The session is opened when it is first needed (registering the tools, or a call after the
previous session was lost), held by a task of the server's own task group (see ``_link``), and
closed when the server is closed: by the application's ``async with``, or by the supervisor
whose registry the server was added to (``ToolRegistry.add_source``), after its runs stopped.

How a call ends, and what the runtime makes of it:

=============================================  =============================================
what happened                                  the attempt's outcome
=============================================  =============================================
the server answered                            its result (``isError``: an error result)
the server answered the request with a         an error result saying so (the tool did not
JSON-RPC error                                 run, or failed: the server says which)
the server answered with what is not a         ``OutcomeUnknownError``: the tool may have run
result (the SDK cannot read it)
no answer within ``call_timeout``              the attempt is cancelled: an unknown outcome
no session could be opened (refused, a         ``ToolUnavailableError``: nothing was sent;
command that fails, no answer to               the run rests (``sleeping``, saying why) and
``initialize``), or the server no longer       tries again (about 1 s doubling to 60 s) for as long
knew the session (HTTP 404), or the request    as the server is down, whatever the policy;
never left this process                        neither ``retries`` nor ``max_tool_calls`` are
                                               spent, and the call runs once it is back
the session was lost while the call waited     ``OutcomeUnknownError``: the request may have
(the process died, a stream broke, the         been carried out; the tool's replay policy
connection closed)                             decides, while ``retries`` are left
the tool changed on the server since it was    an error result: nothing was sent; restart
registered (seen when a session reopens)       the process to register the new contract
=============================================  =============================================
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TextIO, final

import anyio
import anyio.abc
import httpx
import jsonschema
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .._errors import (
    OutcomeUnknownError,
    ToolDefinitionError,
    ToolError,
    ToolUnavailableError,
)
from ..tools import ReplayPolicy, ToolContext, ToolRegistry, ToolSpec
from ..tools._adapters import ArgsValidator, ToolOptions
from ._link import (
    IDEMPOTENCY_KEY_META,
    Link,
    MCPServerUnavailableError,
    WatchedTransport,
    describe,
    list_tools,
    log,
)
from ._policy import derive_policy
from ._results import error_blocks, tether_result
from ._stderr import server_stderr

CLOSE_TIMEOUT = 5.0
"""Seconds closing waits for each session to end (a stdio server is sent EOF, then, after
the SDK's own wait, terminated) before it is cancelled."""

_SESSION_GONE = 32600  # what the SDK answers when an HTTP server no longer knows the session
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


class _Refused(Exception):
    """The call was not sent or the server refused it: an error result saying ``args[0]``."""


@final
class MCPServer:
    """The tools of one MCP server, registered into a ``ToolRegistry`` with replay policies.

    Give exactly one of ``command`` (a server started as a child process, spoken to over
    stdio) or ``url`` (a streamable HTTP endpoint). Nothing is started or connected until the
    tools are registered or called.

    Args:
        name: what logs and error messages call the server.
        command: the server's command line (``["python", "server.py"]``).
        env: the child's environment on top of the SDK's safe default (``PATH``, ``HOME``,
            ...); ``cwd``: its working directory; ``errlog``: a file for its standard error
            as it is; by default each line goes to the ``tether.mcp`` logger, at DEBUG, or at
            WARNING when it looks like an error (see ``_stderr``).
        url: the server's streamable HTTP endpoint; ``headers``: sent with every request.
        trusted: believe the server's tool annotations when choosing replay policies (see
            ``tether.mcp``). Without it every tool is ``escalate`` unless ``tools`` says
            otherwise.
        idempotency_key: the server deduplicates ``tools/call`` requests by the key in
            ``_meta[IDEMPOTENCY_KEY_META]``: on a trusted server, tools that are neither
            read-only nor idempotent get policy ``idempotency_key`` instead of ``escalate``.
        tools: per-tool overrides (``ToolOptions``), by the server's tool name.
        include: register only these tools of the server (all by default).
        prefix: put before every tool's name (``"helpdesk_"``), so that two servers' tools
            cannot collide; characters a tool name may not hold become ``_``.
        retries: further attempts of a call after an unknown outcome or a timeout, unless
            ``tools`` says otherwise (see ``ToolRegistry.tool``). A server that cannot be
            reached spends none: its calls wait for it for as long as it takes.
        connect_timeout: seconds to open a session (start, initialize, list the tools).
        call_timeout: seconds one attempt of a call may wait for the server's answer, for the
            tools whose ``ToolOptions`` give no ``timeout``: past it the attempt is cancelled
            and its outcome is unknown, so the tool's policy decides (a server that never
            answers must not hold a run forever). ``None``: no limit.

    Raises:
        ValueError: not exactly one of ``command`` and ``url``.
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        errlog: TextIO | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        trusted: bool = False,
        idempotency_key: bool = False,
        tools: Mapping[str, ToolOptions] | None = None,
        include: Iterable[str] | None = None,
        prefix: str = "",
        retries: int = 2,
        connect_timeout: float = 30.0,
        call_timeout: float | None = 300.0,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("give exactly one of command= (stdio) and url= (streamable HTTP)")
        if command is not None and (isinstance(command, str) or not command):
            raise ValueError(f"command must be a non-empty list of arguments, got {command!r}")
        self.name = name
        self._command = list(command) if command is not None else None
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._errlog = errlog
        self._url = url
        self._headers = dict(headers or {})
        self.trusted = trusted
        self.idempotency_key = idempotency_key
        self._options = dict(tools or {})
        self._include = None if include is None else set(include)
        self._prefix = prefix
        self._retries = retries
        self._connect_timeout = connect_timeout
        self._call_timeout = call_timeout
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._lock: anyio.Lock | None = None
        self._link: Link | None = None
        self._links: set[Link] = set()
        self._contracts: dict[str, str] = {}  # server tool name -> contract as registered
        self._registered: dict[int, list[str]] = {}  # id(registry) -> names registered there

    def __repr__(self) -> str:
        where = self._url if self._url is not None else " ".join(self._command or [])
        return f"<MCPServer {self.name} {where}>"

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> MCPServer:
        if self._tg is not None:
            raise RuntimeError(f"MCP server {self.name!r} is already open")
        stack = AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._lock = anyio.Lock()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End every session: stdio servers get EOF on their input (and are terminated after
        the SDK's grace period), HTTP sessions are ended with a ``DELETE``. Idempotent.

        On cancellation: the sessions are cancelled (a stdio child may outlive this process
        until it reads EOF).
        """
        stack, tg = self._stack, self._tg
        if stack is None or tg is None:
            return
        self._stack = self._tg = self._link = None
        for link in list(self._links):
            link.lose("closed")
        tg.cancel_scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
        await stack.aclose()

    def opened(self, registry: ToolRegistry) -> Any:
        """``ToolSource``: register the tools into ``registry`` and stay open until exit.

        If the application has entered this server itself, it is left open at exit.
        """
        return self._opened(registry)

    @asynccontextmanager
    async def _opened(self, registry: ToolRegistry) -> AsyncIterator[MCPServer]:
        if self._tg is not None:
            await self.register(registry)
            yield self
            return
        async with self:
            await self.register(registry)
            yield self

    # ------------------------------------------------------------------ registering

    async def register(self, registry: ToolRegistry) -> list[ToolSpec]:
        """List the server's tools and register them into ``registry``.

        Each tool's input schema, name and description are the server's (its contract is
        pinned by runs as for any tool: a changed schema or a vanished tool stops a resumed
        run as ``needs_attention`` naming it). Its replay policy is derived as ``tether.mcp``
        says; its other options come from ``ToolOptions``. Registering again (a later
        supervisor on the same registry) replaces the tools it registered there before.

        Returns:
            The registered specs, in the server's order.

        Raises:
            RuntimeError: the server is not open (``async with server`` or a supervisor).
            ToolUnavailableError: no session could be opened.
            ToolDefinitionError: an option in ``tools`` that does not fit (a ``verify``
                without policy ``verify``, a bad timeout), or a name taken by another tool.
                A server tool whose name cannot be made a tool name, or whose schema is
                not a valid JSON schema, is left out with an error in the log instead.
        """
        link = await self._connected()
        for old in self._registered.pop(id(registry), []):
            if old in registry:
                registry.unregister(old)
        specs: list[ToolSpec] = []
        mine: dict[str, str] = {}  # the names registered so far, each with the server's name
        self._registered[id(registry)] = []
        for tool in link.tools.values():
            if self._include is not None and tool.name not in self._include:
                continue
            spec = self._register_one(registry, tool, mine)
            if spec is not None:
                specs.append(spec)
                self._registered[id(registry)].append(spec.name)
        for missing in sorted(set(self._options) - set(link.tools)):
            log.warning("MCP server %s lists no tool %r (given in tools=)", self.name, missing)
        return specs

    def _register_one(
        self, registry: ToolRegistry, tool: types.Tool, mine: dict[str, str]
    ) -> ToolSpec | None:
        name = self._prefix + _NOT_A_NAME.sub("_", tool.name)
        options = self._options.get(tool.name, ToolOptions())
        policy, why = derive_policy(
            tool.annotations, options, trusted=self.trusted, idempotency_key=self.idempotency_key
        )
        retries = self._retries if options.retries is None else options.retries
        try:
            check = _full_check(tool.inputSchema)
        except jsonschema.SchemaError as exc:
            log.error("MCP server %s: tool %r left out: bad schema: %s", self.name, name, exc)
            return None
        if not 1 <= len(name) <= 64:
            log.error("MCP server %s: tool %r left out: its name is too long", self.name, name)
            return None
        try:
            spec = registry.register_schema(
                self._caller(tool.name, name),
                name=name,
                input_schema=tool.inputSchema,
                version=options.version,
                description=tool.description or "",
                policy=policy,
                verify=options.verify if policy is ReplayPolicy.VERIFY else None,
                approval=options.approval,
                approval_timeout=options.approval_timeout,
                on_approval_timeout=options.on_approval_timeout,
                timeout=self._call_timeout if options.timeout is None else options.timeout,
                retries=retries,
                cache_control=options.cache_control,
                check_args=check,
            )
        except ToolDefinitionError as exc:  # name the server, and the tool's own name
            theirs = f" (its tool {mine[name]!r} has that name too)" if name in mine else ""
            taken = name in registry  # (by another tool of the registry, or of this server)
            hint = "; give the server a prefix=, or include= only the tools to register"
            raise ToolDefinitionError(
                name,
                f"MCP server {self.name!r}: its tool {tool.name!r}{theirs}: {exc.reason}"
                + (hint if taken else ""),
            ) from exc
        self._contracts[tool.name] = _contract(tool)
        mine[name] = tool.name
        log.info("MCP server %s: %s registered, policy %s (%s)", self.name, name, policy, why)
        return spec

    def _caller(self, tool: str, name: str) -> Any:
        async def call(arguments: dict[str, Any], ctx: ToolContext) -> Any:
            try:
                result = await self._request(
                    tool, arguments, key=ctx.idempotency_key, label=name, check_contract=True
                )
            except _Refused as exc:
                return error_blocks(str(exc))
            except ToolUnavailableError as exc:
                # Raised by this adapter's own request for this very attempt: bound to it,
                # it is the runtime's proof that nothing was sent (an error from elsewhere
                # is not, see ToolUnavailableError). Only for an attempt of this tool: a
                # composite tool that invoked it with its own context may have had an
                # effect before, so its attempt is not proven unsent.
                if ctx.tool == name:
                    exc.attempt = ctx
                raise
            return tether_result(result)

        call.__qualname__ = call.__name__ = name
        return call

    # ------------------------------------------------------------------ calling

    async def call(
        self, tool: str, arguments: dict[str, Any], *, key: str | None = None
    ) -> types.CallToolResult:
        """Call ``tool`` (the server's name for it) once, as the registered tools do.

        For ``verify`` functions and the like. ``key``, when given, is sent in
        ``_meta[IDEMPOTENCY_KEY_META]``.

        Its ``ToolUnavailableError`` is bound to no attempt: raised through a tool of your
        own, it is that tool's error result (or a ``retry_on`` failure), never a call that
        waits for the server, as the tool may have had an effect before it. A composite
        tool that calls it after a side effect should catch it and say what happened; one
        that calls it before any effect may raise ``ToolUnavailableError(name, why,
        attempt=ctx)`` to have its own call wait for the server.

        Raises:
            RuntimeError: the server is not open.
            ToolUnavailableError: no session could be opened (nothing was sent).
            OutcomeUnknownError: the session was lost while the call waited.
            ToolError: the server answered with a JSON-RPC error.

        On cancellation: propagates; the call's outcome is unknown.
        """
        try:
            return await self._request(tool, arguments, key=key, label=tool, check_contract=False)
        except _Refused as exc:
            raise ToolError(tool, str(exc)) from None

    async def _request(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        key: str | None,
        label: str,
        check_contract: bool,
    ) -> types.CallToolResult:
        link = await self._connected()
        if check_contract:
            listed = link.tools.get(tool)
            if listed is None or _contract(listed) != self._contracts.get(tool):
                what = "no longer lists it" if listed is None else "changed its contract"
                if tool not in link.refused:  # said once a session, not at every call
                    link.refused.add(tool)
                    log.warning(
                        "MCP server %s %s since %s was registered: its calls get an error "
                        "result until this process is restarted (to register it anew)",
                        self.name,
                        what,
                        label,
                    )
                raise _Refused(
                    f"not called: MCP server {self.name!r} {what} since {label!r} was "
                    "registered; the process must be restarted to register it anew"
                )
        session = link.session
        assert session is not None
        meta = None if key is None else {IDEMPOTENCY_KEY_META: key}
        scope = anyio.CancelScope()
        link.waiting.add(scope)
        try:
            if link.lost is not None:
                scope.cancel()
            with scope:
                return await session.call_tool(tool, arguments, meta=meta)
        except McpError as exc:
            code, message = exc.error.code, exc.error.message
            said = _said_by_sdk(code, message, link)
            if said == "closed":
                link.lose(f"connection closed: {message}")
                if key is not None and key in link.unsent:
                    raise ToolUnavailableError(label, f"not sent: {link.lost}") from exc
                raise OutcomeUnknownError(label, self._lost(link)) from exc
            if said == "session gone":
                link.lose(f"the server ended the session: {message}")
                raise ToolUnavailableError(
                    label, f"MCP server {self.name!r} no longer knew the session; not called"
                ) from exc
            if said == "timeout":
                raise OutcomeUnknownError(label, f"no answer in time: {message}") from exc
            raise _Refused(
                f"MCP server {self.name!r} answered with an error: {message} (code {code})"
            ) from exc
        except (pydantic.ValidationError, RuntimeError) as exc:
            # The server answered, but not with a result the SDK could read (a malformed
            # result, structured content its own output schema refuses): the tool may have
            # run, so it is an unknown outcome for the tool's policy, not an error to retry.
            raise OutcomeUnknownError(
                label,
                f"MCP server {self.name!r} answered, but its answer could not be read "
                f"({describe(exc)}); the call may have been carried out",
            ) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            link.lose(f"the session's streams closed: {describe(exc)}")
            raise OutcomeUnknownError(label, self._lost(link)) from exc
        finally:
            link.waiting.discard(scope)
        if key is not None and key in link.unsent:  # its request never left this process
            raise ToolUnavailableError(label, f"not sent: {link.lost}")
        raise OutcomeUnknownError(label, self._lost(link))  # cancelled by Link.lose

    def _lost(self, link: Link) -> str:
        return (
            f"the session with MCP server {self.name!r} was lost while the call waited "
            f"({link.lost}); it may have been carried out"
        )

    # ------------------------------------------------------------------ sessions

    async def _connected(self) -> Link:
        """The live session, opening one if there is none."""
        link, lock, tg = self._link, self._lock, self._tg
        if link is not None and link.lost is None:
            return link
        if lock is None or tg is None:
            raise RuntimeError(
                f"MCP server {self.name!r} is not open: enter it (async with), or add it to "
                "the registry of a supervisor (tools.add_source(server))"
            )
        async with lock:
            link = self._link
            if link is not None and link.lost is None:
                return link
            link = Link(server=self.name)
            await tg.start(self._hold, link)
            self._link = link
            return link

    async def _hold(self, link: Link, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Open a session and hold it until it is lost or closed (see ``_link``).

        Raises:
            ToolUnavailableError: before it started: the session could not be opened.
        """
        started = False
        self._links.add(link)
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(link))
                # The session reads through a relay that notices the end of the server's
                # messages (a process that died, even while idle) and loses the link at once.
                relayed, received = anyio.create_memory_object_stream[SessionMessage | Exception]()
                relay = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(relay.cancel_scope.cancel)
                relay.start_soon(_relay, read, relayed, link)
                session = await stack.enter_async_context(ClientSession(received, write))
                with anyio.fail_after(self._connect_timeout):
                    await session.initialize()
                    link.tools = await list_tools(session)
                link.session = session
                task_status.started()
                started = True
                await link.ended.wait()
        except Exception as exc:  # a session that fails must not take the supervisor down
            if not started:
                said = " | ".join(link.last_words)  # read to the end: the transport is closed
                raise MCPServerUnavailableError(
                    self.name,
                    f"cannot open a session ({self!r}): {describe(exc)}"
                    + (f"; its last words on standard error: {said}" if said else ""),
                ) from exc
            log.warning("MCP server %s: session ended with %s", self.name, describe(exc))
        finally:
            link.lose(link.lost or "closed")
            self._links.discard(link)

    @asynccontextmanager
    async def _transport(self, link: Link) -> AsyncIterator[tuple[Any, Any]]:
        if self._command is not None:
            params = StdioServerParameters(
                command=self._command[0], args=self._command[1:], env=self._env, cwd=self._cwd
            )
            async with AsyncExitStack() as stack:
                # Entered first, left last: the server's last lines are read after it ended.
                errlog = self._errlog
                if errlog is None:
                    errlog = await stack.enter_async_context(
                        server_stderr(self.name, link.last_words)
                    )
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                yield read, write
            return
        assert self._url is not None
        transport = WatchedTransport(httpx.AsyncHTTPTransport(), link.lose, link.unsent.add)
        client = httpx.AsyncClient(
            transport=transport,
            headers=self._headers,
            timeout=httpx.Timeout(30.0, read=300.0),  # the SDK's: streams may idle a while
        )
        async with (
            client,
            streamable_http_client(self._url, http_client=client) as (read, write, _),
        ):
            yield read, write


def _said_by_sdk(code: int, message: str, link: Link) -> str | None:
    """What an ``McpError`` the SDK made itself says (``closed``: the connection closed,
    ``session gone``: the HTTP server no longer knew the session, ``timeout``: no answer
    in the SDK's own time), or ``None`` for an error the server answered with.

    The SDK's own errors share their codes with what a server may send (-32000 begins
    JSON-RPC's range for a server's errors), so the code alone does not tell them apart: its
    words do, and for a closed connection, the relay having seen the server's stream end.
    """
    if code == types.CONNECTION_CLOSED and (
        link.lost is not None or message == "Connection closed"
    ):
        return "closed"
    if code == _SESSION_GONE and message == "Session terminated":
        return "session gone"
    if code == httpx.codes.REQUEST_TIMEOUT and message.startswith("Timed out while waiting"):
        return "timeout"
    return None


async def _relay(
    read: MemoryObjectReceiveStream[SessionMessage | Exception],
    send: MemoryObjectSendStream[SessionMessage | Exception],
    link: Link,
) -> None:
    async with read, send:  # the session would close what it reads: so does the relay
        try:
            async for message in read:
                await send.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
    link.lose("the server closed the connection")


def _contract(tool: types.Tool) -> str:
    """What registration pinned of a server tool: its description and input schema."""
    return json.dumps([tool.description or "", tool.inputSchema], sort_keys=True)


def _full_check(schema: dict[str, Any]) -> ArgsValidator:
    """A check of arguments against the whole schema (``jsonschema``), for ``check_args``.

    Raises:
        jsonschema.SchemaError: the schema itself is not valid.
    """
    kind = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    kind.check_schema(schema)
    validator = kind(schema)

    def check(arguments: dict[str, Any]) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is None:
            return None
        return f"{error.message} - at `{error.json_path}`"

    return check
