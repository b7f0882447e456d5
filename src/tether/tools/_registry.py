"""``ToolRegistry``: the tools one application offers, each in one or more versions."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, final, overload

from .._errors import ToolDefinitionError, UnknownToolError
from ..journal import ToolPin
from ._policy import ApprovalTimeout, ApprovalTimeoutName, PolicyName, ReplayPolicy
from ._schema_tool import ArgsValidator, build_schema_spec
from ._sources import ToolSource
from ._spec import GivenOptions, ToolFunction, ToolSpec, build_spec
from ._waits import Wait, sleep_for

if TYPE_CHECKING:
    from ..models import ToolDefinition

_F = TypeVar("_F", bound=ToolFunction)

_CHUNK = re.compile(r"\d+|\D+")


def _version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key that orders versions naturally: ``"2" < "10"``, ``"1.9" < "1.10"``.

    A version is split into runs of digits and of other characters. Digit runs compare as
    numbers, other runs as text, and a digit run sorts before a text run at the same place.
    So dates (``"2024-05-01"``) and dotted numbers (``"1.2.10"``) order as expected.
    """
    return tuple(
        (0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk)
        for chunk in _CHUNK.findall(version)
    )


@final
class ToolRegistry:
    """The tools an application offers its agents. Create one and pass it where it is needed.

    Tools are ``async def`` functions registered with the ``tool`` decorator. A registry can
    hold several versions of one tool name, so that a run finishes on the contract it started
    with (its manifest pins ``(name, version, schema_hash)``) while new runs get the latest.

    The *latest* version of a name is the highest in natural order, where runs of digits
    compare as numbers (``"2" < "10"``, ``"1.9" < "1.10"``, ``"2024-05-01" < "2024-06-01"``).
    It is not the most recently registered one, so reordering definitions in the source never
    changes which contract new runs get. Two version strings that compare equal (``"1"`` and
    ``"01"``) cannot both be registered.

    Iterating yields the latest ``ToolSpec`` of each name, in the order the names were first
    registered. ``name in registry`` tests for a name; ``(name, version) in registry`` for one
    version of it.
    """

    def __init__(self) -> None:
        # name -> version -> spec; names keep their first-registration order.
        self._tools: dict[str, dict[str, ToolSpec]] = {}
        self._sources: list[ToolSource] = []
        self._open: AsyncExitStack | None = None
        self._openers = 0

    @overload
    def tool(self, fn: _F, /) -> _F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        version: str = "1",
        description: str | None = None,
        policy: ReplayPolicy | PolicyName = ReplayPolicy.ESCALATE,
        verify: ToolFunction | None = None,
        approval: bool = False,
        approval_timeout: float | None = None,
        on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        cache_control: dict[str, Any] | None = None,
        compatible: bool = False,
    ) -> Callable[[_F], _F]: ...

    def tool(
        self,
        fn: _F | None = None,
        /,
        *,
        name: str | None = None,
        version: str = "1",
        description: str | None = None,
        policy: ReplayPolicy | PolicyName = ReplayPolicy.ESCALATE,
        verify: ToolFunction | None = None,
        approval: bool = False,
        approval_timeout: float | None = None,
        on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        cache_control: dict[str, Any] | None = None,
        compatible: bool = False,
    ) -> _F | Callable[[_F], _F]:
        """Register an async function as a tool; use as ``@registry.tool`` or with options.

        The function is returned unchanged, so it can still be called and tested directly.
        Its parameters, with their annotations and defaults, become the tool's input schema;
        a parameter annotated ``ToolContext`` (any name) is left out of the schema and receives
        the call's context. Describe a parameter to the model with
        ``Annotated[str, msgspec.Meta(description=...)]``.

        Args:
            fn: the function (when used as a bare decorator).
            name: the name the model calls it by; defaults to the function's ``__name__``.
                1 to 64 letters, digits, ``_`` or ``-``.
            version: the version of this tool's contract. Register a new version whenever
                the arguments, description or behaviour change in a way a started run must
                not see.
            description: what the model is told; defaults to the first paragraph of the
                function's docstring.
            policy: what to do with a dangling call on resume (see ``ReplayPolicy``);
                ``"escalate"`` by default.
            verify: for ``policy="verify"`` only, and required then: an async function taking
                the same parameters as the tool (its ``ToolContext`` parameter optional) that
                returns the call's result if the call landed, or ``None`` if it did not.
            approval: whether a person must approve each call before it runs.
            approval_timeout: with ``approval``: seconds to wait for a decision; ``None``
                sets no deadline of the tool's own.
            on_approval_timeout: with ``approval``: ``"reject"`` (the default) or
                ``"escalate"`` when the wait expires.
            timeout: seconds one attempt may run. An attempt that takes longer is cancelled
                and its outcome is unknown: it goes through ``policy`` like a call whose
                process died (run again, verified, or escalated) while ``retries`` are left;
                with none left, a ``verify`` tool is verified once, an ``escalate`` one is
                escalated and any other gets an error result saying it timed out.
            retries: how many more attempts a call gets after an attempt that timed out or
                raised one of ``retry_on``. Attempts back off (1 s, doubling, at most 30 s,
                with jitter); every attempt is journaled and counts against the run's
                ``max_tool_calls``.
            retry_on: exception types (a type or a tuple) worth retrying: an attempt that
                raises one is known to have failed, so it runs again whatever the policy.
                Any other exception is the call's error result at once, except
                ``ToolUnavailableError`` (the tool's service could not be reached, nothing
                was sent), which needs no ``retry_on``: the run rests and tries again (about
                1 s doubling to 60 s) for as long as it takes, spending neither ``retries`` nor
                ``max_tool_calls``.
            cache_control: put on the tool's definition as given (``{"type":
                "ephemeral"}``): a prompt-cache breakpoint after the tools up to this one.
                Pinned with the run (a running run keeps the one it started with).
            compatible: this contract may take over from an earlier contract of the same
                name and version that a started run pinned, when the change keeps every call
                that contract allowed valid (``tether.tools.incompatibility``: descriptions
                reworded, new optional parameters; nothing removed, renamed, retyped or newly
                required): such a run goes on with this contract, journaled as ``repinned``,
                instead of parking for a person. Off by default.

        Returns:
            ``fn`` itself, or a decorator that registers and returns its argument.

        Raises:
            ToolDefinitionError: naming the tool and what is wrong: not an ``async def``;
                ``*args``, ``**kwargs`` or positional-only parameters; a parameter without an
                annotation or with one msgspec cannot describe; an unknown policy; ``verify``
                missing, not allowed, or with different parameters; approval options without
                ``approval=True``; a bad name or version; the same (name, version) twice; a
                ``timeout`` that is not a positive number, negative ``retries``, ``retry_on``
                that is not exception types, or ``retry_on`` without ``retries``.
        """
        given = GivenOptions(
            version=version,
            policy=policy,
            verify=verify,
            approval=approval,
            approval_timeout=approval_timeout,
            on_approval_timeout=on_approval_timeout,
            timeout=timeout,
            retries=retries,
            retry_on=retry_on,
            cache_control=cache_control,
            compatible=compatible,
        )

        def decorate(func: _F) -> _F:
            self._add(build_spec(func, name=name, description=description, given=given))
            return func

        return decorate(fn) if fn is not None else decorate

    def register(
        self,
        fn: ToolFunction,
        *,
        name: str | None = None,
        version: str = "1",
        description: str | None = None,
        policy: ReplayPolicy | PolicyName = ReplayPolicy.ESCALATE,
        verify: ToolFunction | None = None,
        approval: bool = False,
        approval_timeout: float | None = None,
        on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        cache_control: dict[str, Any] | None = None,
        compatible: bool = False,
    ) -> ToolSpec:
        """Register ``fn`` as a tool and return its spec; ``tool`` without the decorator.

        Takes the same options as ``tool``.

        Raises:
            ToolDefinitionError: as for ``tool``. Nothing is registered then.
        """
        spec = build_spec(
            fn,
            name=name,
            description=description,
            given=GivenOptions(
                version=version,
                policy=policy,
                verify=verify,
                approval=approval,
                approval_timeout=approval_timeout,
                on_approval_timeout=on_approval_timeout,
                timeout=timeout,
                retries=retries,
                retry_on=retry_on,
                cache_control=cache_control,
                compatible=compatible,
            ),
        )
        self._add(spec)
        return spec

    def register_schema(
        self,
        fn: ToolFunction,
        *,
        name: str,
        input_schema: dict[str, Any],
        version: str = "1",
        description: str = "",
        policy: ReplayPolicy | PolicyName = ReplayPolicy.ESCALATE,
        verify: ToolFunction | None = None,
        approval: bool = False,
        approval_timeout: float | None = None,
        on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None,
        timeout: float | None = None,
        retries: int = 0,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        cache_control: dict[str, Any] | None = None,
        check_args: ArgsValidator | None = None,
        compatible: bool = False,
    ) -> ToolSpec:
        """Register a tool described by a JSON schema rather than by a signature.

        For tools whose contract comes from elsewhere (an MCP server): ``fn`` is called as
        ``await fn(arguments, ctx)`` with the checked arguments (a dict, a copy of the model's)
        and the call's ``ToolContext``; ``verify``, for ``policy="verify"``, likewise. The
        schema is pinned as given (its hash covers name, version, description and schema, as
        for any tool), so a changed schema stops resumed runs as ``needs_attention``.

        Arguments are checked before ``fn`` runs: an object, its ``required`` properties
        present, no unknown property when ``additionalProperties`` is ``false``, and each
        top-level property of its declared JSON ``type``; ``check_args``, when given, is a
        fuller check run after that, returning the problem in words or ``None``.

        Takes the other options of ``tool``.

        Raises:
            ToolDefinitionError: as for ``tool``; also a schema that is not a JSON object
                schema (``"type": "object"``), a function that is not ``async``. Nothing is
                registered then.
        """
        spec = build_schema_spec(
            fn,
            name=name,
            input_schema=input_schema,
            description=description,
            given=GivenOptions(
                version=version,
                policy=policy,
                verify=verify,
                approval=approval,
                approval_timeout=approval_timeout,
                on_approval_timeout=on_approval_timeout,
                timeout=timeout,
                retries=retries,
                retry_on=retry_on,
                cache_control=cache_control,
                compatible=compatible,
            ),
            check_args=check_args,
        )
        self._add(spec)
        return spec

    def unregister(self, name: str) -> None:
        """Remove every version of tool ``name`` (a source whose tools changed re-registers).

        Runs that pinned it stop as ``needs_attention`` on their next resume in a process
        without it, as for any tool that is gone.

        Raises:
            UnknownToolError: no tool by that name.
        """
        self._versions_of(name)
        del self._tools[name]

    def add_source(self, source: ToolSource) -> None:
        """Have ``source`` register its tools (an MCP server's) when a supervisor opens.

        A ``Supervisor`` given this registry enters ``open_sources()`` on entry and leaves it
        on exit, after its runs have stopped: the source registers its tools then, keeps its
        connections for the calls, and closes them last.
        """
        self._sources.append(source)

    @asynccontextmanager
    async def open_sources(self) -> AsyncIterator[ToolRegistry]:
        """Open every added source (registering its tools) until the block ends.

        Nested and repeated entries share one opening: the first opens the sources, the last
        to leave closes them, so several supervisors may share a registry.

        Raises:
            Exception: whatever a source raises while it opens (an MCP server that cannot be
                reached: ``ToolUnavailableError``); the sources opened before it are closed.

        On cancellation: the sources opened so far are closed, and it propagates.
        """
        if self._open is None:
            async with AsyncExitStack() as stack:
                for source in self._sources:
                    await stack.enter_async_context(source.opened(self))
                self._open = stack.pop_all()
        self._openers += 1
        try:
            yield self
        finally:
            self._openers -= 1
            if self._openers == 0 and self._open is not None:
                stack, self._open = self._open, None
                await stack.aclose()

    def _add(self, spec: ToolSpec) -> None:
        known = self._tools.get(spec.name, {})
        key = _version_key(spec.version)
        for other in known:
            if _version_key(other) == key:
                same = "is already registered" if other == spec.version else f"equals {other!r}"
                raise ToolDefinitionError(spec.name, f"version {spec.version!r} {same}")
        known = {**known, spec.version: spec}
        self._tools[spec.name] = dict(sorted(known.items(), key=lambda item: _version_key(item[0])))

    def add_sleep_tool(self, *, max_seconds: float, name: str = "sleep") -> ToolSpec:
        """Register a tool the model may call to wait a while (at most ``max_seconds``).

        The call parks the run (``tether.sleep_for``): no task, lock or descriptor while it
        sleeps, and whichever worker serves the store then continues it. A longer wait than
        ``max_seconds`` is an error result the model reads.

        Raises:
            ToolDefinitionError: ``max_seconds`` is not a positive number, or ``name`` is taken.
        """
        if not (isinstance(max_seconds, int | float) and max_seconds > 0):
            raise ToolDefinitionError(name, f"max_seconds must be positive, got {max_seconds!r}")
        limit = float(max_seconds)

        async def sleep(seconds: float, reason: str = "") -> Wait:
            if not 0 <= seconds <= limit:
                raise ValueError(f"seconds must be between 0 and {limit:g}, got {seconds:g}")
            return sleep_for(
                seconds, result=f"slept {seconds:g} s" + (f" ({reason})" * bool(reason))
            )

        sleep.__doc__ = (
            f"Wait a while before going on (at most {limit:g} seconds), e.g. to check "
            "something again later; say why in reason."
        )
        return self.register(sleep, name=name, policy=ReplayPolicy.RERUN)

    def get(self, name: str, version: str | None = None) -> ToolSpec:
        """The spec of ``name`` at ``version``, or at its latest version when ``None``.

        Raises:
            UnknownToolError: no tool by that name, or not in that version.
        """
        known = self._versions_of(name)
        if version is None:
            return known[next(reversed(known))]
        try:
            return known[version]
        except KeyError:
            held = ", ".join(repr(v) for v in known)
            raise UnknownToolError(
                name, f"version {version!r} is not registered (registered: {held})"
            ) from None

    def versions(self, name: str) -> tuple[str, ...]:
        """The registered versions of ``name``, oldest first (the last one is the latest).

        Raises:
            UnknownToolError: no tool by that name.
        """
        return tuple(self._versions_of(name))

    def pinned(self, pin: ToolPin) -> ToolSpec:
        """The spec a run pinned, checked against the contract it pinned.

        Raises:
            UnknownToolError: the pinned name or version is not registered, or it is but its
                schema hash differs from the pinned one (its contract changed under the same
                version; register the changed contract as a new version instead).
        """
        spec = self.get(pin.name, pin.version)
        if spec.schema_hash != pin.schema_hash:
            raise UnknownToolError(
                pin.name,
                f"version {pin.version!r} changed since the run pinned it (schema hash "
                f"{pin.schema_hash[:12]}..., now {spec.schema_hash[:12]}...); keep the old "
                "contract registered under its version and give the new one a new version",
            )
        return spec

    def definitions(
        self, pins: Iterable[ToolPin | tuple[str, str]] | None = None
    ) -> list[ToolDefinition]:
        """Anthropic tool definitions (``{"name", "description", "input_schema"}``).

        Args:
            pins: which versions to describe, in order: ``ToolPin``s (checked as by
                ``resolve``) or ``(name, version)`` pairs. ``None``: the latest version of
                every tool, in registration order.

        Raises:
            UnknownToolError: a pin names a tool or version that is not registered, or a
                ``ToolPin``'s schema hash does not match.
        """
        if pins is None:
            return [spec.definition(spec.cache_control) for spec in self]
        pins = list(pins)
        specs = [
            self.pinned(pin) if isinstance(pin, ToolPin) else self.get(pin[0], pin[1])
            for pin in pins
        ]
        return [
            spec.definition(pin.cache_control if isinstance(pin, ToolPin) else spec.cache_control)
            for pin, spec in zip(pins, specs, strict=True)
        ]

    def pins(self) -> list[ToolPin]:
        """The contracts of the latest versions, for a new run's manifest."""
        return [spec.pin() for spec in self]

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._tools
        if isinstance(item, tuple) and len(item) == 2:
            name, version = item
            if isinstance(name, str) and isinstance(version, str):
                return version in self._tools.get(name, {})
        return False

    def __iter__(self) -> Iterator[ToolSpec]:
        for known in self._tools.values():
            yield known[next(reversed(known))]

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        tools = ", ".join(f"{name}@{','.join(known)}" for name, known in self._tools.items())
        return f"<ToolRegistry {tools}>"

    def _versions_of(self, name: str) -> dict[str, ToolSpec]:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, "no tool by this name is registered") from None
