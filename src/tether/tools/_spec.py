"""One registered version of a tool: its contract with the model, its policies, its functions."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast, final

import msgspec

from .._errors import ToolArgumentsError, ToolDefinitionError, ToolError
from ..journal import ToolPin
from ._content import ContentBlocks
from ._context import ToolContext
from ._policy import ApprovalTimeout, ApprovalTimeoutName, PolicyName, ReplayPolicy
from ._signature import args_type, input_schema, read_signature, type_name
from ._waits import Wait

if TYPE_CHECKING:
    from ..models import CacheControl, ToolDefinition

ToolFunction = Callable[..., Awaitable[Any]]
"""An ``async def`` function registered as a tool, or as a tool's ``verify`` function."""

ArgsCheck = Callable[[dict[str, Any]], dict[str, Any]]
"""Checks a call's arguments (a JSON object) and returns what the tool is called with; raises
``ToolArgumentsError``."""

Caller = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
"""Calls a tool (or verify) function with checked arguments and the call's context."""

_E = TypeVar("_E", ReplayPolicy, ApprovalTimeout)

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@final
@dataclass(frozen=True, kw_only=True, eq=False)
class ToolSpec:
    """One version of one tool, as registered: what the model sees and how calls are run.

    Built by ``ToolRegistry``; do not construct it yourself.

    Attributes:
        name: the name the model calls the tool by.
        version: the version of its contract (arguments, description, behaviour).
        description: what the model is told the tool does.
        policy: what to do with a dangling call (see ``ReplayPolicy``).
        approval: whether a person must approve each call before it runs.
        approval_timeout: seconds a call waits for approval before ``on_approval_timeout``
            applies; ``None`` sets no deadline of the tool's own.
        on_approval_timeout: what an expired approval wait becomes.
        fn: the tool function itself, unchanged.
        verify: the function that checks whether a dangling call landed (policy ``verify``
            only).
        schema_hash: SHA-256 (hex) of the canonical JSON of the name, version, description and
            input schema: what a run pins, so a changed contract is detected on resume.
        timeout: seconds one attempt may run, or ``None``.
        retries: further attempts after a timeout or an error in ``retry_on``.
        retry_on: the exception types worth another attempt.
    """

    name: str
    version: str
    description: str
    policy: ReplayPolicy
    approval: bool
    approval_timeout: float | None
    on_approval_timeout: ApprovalTimeout
    fn: ToolFunction
    verify: ToolFunction | None
    schema_hash: str
    timeout: float | None = None
    retries: int = 0
    retry_on: tuple[type[BaseException], ...] = ()
    cache_control: dict[str, Any] | None = None
    compatible: bool = False
    _schema_json: str = field(repr=False)
    _check: ArgsCheck = field(repr=False)
    _call: Caller = field(repr=False)
    _verify_call: Caller | None = field(repr=False)
    _takes_ctx: bool = field(repr=False)

    @property
    def takes_ctx(self) -> bool:
        """Whether ``fn`` is given the call's ``ToolContext``."""
        return self._takes_ctx

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments: a top-level object schema, freshly copied."""
        schema: dict[str, Any] = json.loads(self._schema_json)
        return schema

    def definition(self, cache_control: dict[str, Any] | None = None) -> ToolDefinition:
        """This tool as an Anthropic Messages API tool definition.

        Args:
            cache_control: put on the definition when given (a run's pinned one).

        Returns:
            ``{"name", "description", "input_schema"}``; ``description`` is left out when empty.
        """
        schema = self.input_schema
        out: ToolDefinition
        if self.description:
            out = {"name": self.name, "description": self.description, "input_schema": schema}
        else:
            out = {"name": self.name, "input_schema": schema}
        if cache_control is not None:
            # Checked when the tool was registered: a dict with a string "type".
            out["cache_control"] = cast("CacheControl", dict(cache_control))
        return out

    def pin(self) -> ToolPin:
        """The contract a run pins in its manifest when it starts with this version: one
        object per version, shared by every run that pins it (read-only, as records are).
        Built anew, with its copy of the schema, it cost every run's start 4 µs a tool."""
        pin: ToolPin | None = self.__dict__.get("_pin")
        if pin is None:
            pin = ToolPin(
                name=self.name,
                version=self.version,
                schema_hash=self.schema_hash,
                approval=self.approval,
                approval_timeout=self.approval_timeout,
                cache_control=self.cache_control,
                description=self.description,
                input_schema=self.input_schema,
            )
            object.__setattr__(self, "_pin", pin)  # (a frozen dataclass: set once, here)
        return pin

    def validate(self, args: object) -> dict[str, Any]:
        """Check the model's arguments against the schema and convert them to Python values.

        For a tool registered from a signature, nested types are built as declared (a
        ``msgspec.Struct`` or dataclass parameter receives an instance), defaults are filled
        in, and unknown fields are refused. For one registered from a JSON schema
        (``ToolRegistry.register_schema``) the arguments are checked against it and kept as
        they are.

        Args:
            args: the ``input`` of the model's ``tool_use`` block.

        Returns:
            The arguments the tool function is called with (keyword arguments, without the
            ``ToolContext``; or the checked object for a schema tool).

        Raises:
            ToolArgumentsError: ``args`` is not an object, lacks a required field, has an
                unknown one or a value of the wrong type; the message names the field's
                path (``$.address.zip``).
        """
        if not isinstance(args, dict):
            raise ToolArgumentsError(
                self.name, f"arguments must be a JSON object, got {type(args).__name__}"
            )
        return self._check(args)

    async def invoke(self, args: object, ctx: ToolContext) -> Any:
        """Validate ``args`` and run the tool once.

        ``ctx`` is passed only if the function declares a ``ToolContext`` parameter. This runs
        the tool unconditionally: consulting the journal and the replay policy is the caller's
        job. Cancellation propagates from inside the tool unchanged.

        Args:
            args: the model's arguments for this call.
            ctx: the call's identity.

        Returns:
            The tool's return value as plain JSON values (dicts with string keys, lists, str,
            int, float, bool, ``None``), exactly as a resumed run reads it back from the
            journal: Structs, dataclasses and datetimes are converted the way msgspec encodes
            them, tuples become lists and non-finite floats become ``None``. A
            ``ContentBlocks`` is returned checked, its blocks as plain JSON.

        Raises:
            ToolArgumentsError: ``args`` do not match the schema; the tool was not called.
            ToolError: the return value cannot be encoded as JSON.
            Exception: whatever the tool itself raises, unchanged.
        """
        return self._to_json(await self._call(self.validate(args), ctx), "result")

    async def check_landed(self, args: object, ctx: ToolContext) -> Any | None:
        """Ask the ``verify`` function whether a dangling call's effect happened.

        Cancellation propagates from inside the verify function unchanged.

        Args:
            args: the arguments the dangling call was made with.
            ctx: the call's identity (same ``idempotency_key`` as the dangling attempt).

        Returns:
            ``None`` if the call did not land (run it again with the same key); otherwise the
            call's result, converted to JSON values as in ``invoke``.

        Raises:
            ToolError: the tool has no verify function, or its answer cannot be encoded.
            ToolArgumentsError: ``args`` do not match the schema.
            Exception: whatever the verify function itself raises, unchanged.
        """
        if self._verify_call is None:
            raise ToolError(self.name, f"version {self.version} has no verify function")
        result = await self._verify_call(self.validate(args), ctx)
        return None if result is None else self._to_json(result, "verify function's result")

    def _to_json(self, value: object, what: str) -> Any:
        if isinstance(value, ContentBlocks):
            return ContentBlocks(value.checked(self.name), error=value.error)  # as plain JSON
        if isinstance(value, Wait):
            try:
                return value.plain()
            except TypeError as exc:
                raise ToolError(self.name, str(exc)) from exc
        try:
            return msgspec.json.decode(msgspec.json.encode(value))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ToolError(self.name, f"{what} cannot be encoded as JSON: {exc}") from exc


def build_spec(
    fn: ToolFunction, *, name: str | None, description: str | None, given: GivenOptions
) -> ToolSpec:
    """Check a tool function and its options and build its ``ToolSpec``.

    See ``ToolRegistry.tool`` for the options.

    Raises:
        ToolDefinitionError: naming the tool and what is wrong.
    """
    tool = tool_name(fn, name)
    options = check_options(tool, given)
    verify = given.verify
    sig = read_signature(tool, fn, what="function")
    args = args_type(tool, fn, sig)
    schema = input_schema(tool, args, sig)

    verify_call: Caller | None = None
    if verify is not None:
        verify_sig = read_signature(tool, verify, what="verify function")
        _same_parameters(tool, sig.hints, verify_sig.hints)
        verify_call = _keyword_caller(verify, verify_sig.ctx_param)

    text = _first_paragraph(inspect.getdoc(fn)) if description is None else description.strip()
    return assemble(
        tool,
        options,
        description=text,
        schema=schema,
        fn=fn,
        verify=verify,
        check=_struct_check(tool, args),
        call=_keyword_caller(fn, sig.ctx_param),
        verify_call=verify_call,
        takes_ctx=sig.ctx_param is not None,
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    """A tool's options, checked: what ``check_options`` returns to ``assemble``."""

    version: str
    policy: ReplayPolicy
    approval: bool
    approval_timeout: float | None
    on_approval_timeout: ApprovalTimeout
    timeout: float | None
    retries: int
    retry_on: tuple[type[BaseException], ...]
    cache_control: dict[str, Any] | None
    compatible: bool = False


@dataclass(frozen=True, kw_only=True)
class GivenOptions:
    """A tool's options as the application gave them (``ToolRegistry.tool`` documents each),
    before ``check_options``; the defaults are the registry's."""

    version: str = "1"
    policy: ReplayPolicy | PolicyName = ReplayPolicy.ESCALATE
    verify: ToolFunction | None = None
    approval: bool = False
    approval_timeout: float | None = None
    on_approval_timeout: ApprovalTimeout | ApprovalTimeoutName | None = None
    timeout: float | None = None
    retries: int = 0
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = ()
    cache_control: dict[str, Any] | None = None
    compatible: bool = False


def check_options(tool: str, given: GivenOptions) -> Options:
    """Check the options every tool takes, however its arguments are described.

    Raises:
        ToolDefinitionError: naming the tool and what is wrong.
    """
    version, policy, verify = given.version, given.policy, given.verify
    approval, approval_timeout = given.approval, given.approval_timeout
    on_approval_timeout = given.on_approval_timeout
    timeout, retries, retry_on = given.timeout, given.retries, given.retry_on
    cache_control = given.cache_control
    if not isinstance(version, str) or not version:
        raise ToolDefinitionError(tool, f"version must be a non-empty string, got {version!r}")
    replay = _choice(tool, "policy", ReplayPolicy, policy)
    if replay is ReplayPolicy.VERIFY and verify is None:
        raise ToolDefinitionError(tool, "policy 'verify' needs a verify= function")
    if replay is not ReplayPolicy.VERIFY and verify is not None:
        raise ToolDefinitionError(
            tool, f"verify= is only used with policy 'verify', not {replay.value!r}"
        )
    if not approval and (approval_timeout is not None or on_approval_timeout is not None):
        raise ToolDefinitionError(
            tool, "approval_timeout and on_approval_timeout need approval=True"
        )
    if approval_timeout is not None and (
        isinstance(approval_timeout, bool)
        or not isinstance(approval_timeout, int | float)
        or not math.isfinite(approval_timeout)
        or approval_timeout <= 0
    ):
        raise ToolDefinitionError(
            tool, f"approval_timeout must be a positive number of seconds, got {approval_timeout!r}"
        )
    on_timeout = _choice(
        tool,
        "on_approval_timeout",
        ApprovalTimeout,
        ApprovalTimeout.REJECT if on_approval_timeout is None else on_approval_timeout,
    )
    attempt_timeout, retry_count, retry_types = _retry_options(tool, timeout, retries, retry_on)
    return Options(
        version=version,
        policy=replay,
        approval=bool(approval),
        approval_timeout=None if approval_timeout is None else float(approval_timeout),
        on_approval_timeout=on_timeout,
        timeout=attempt_timeout,
        retries=retry_count,
        retry_on=retry_types,
        cache_control=_cache_control(tool, cache_control),
        compatible=_flag(tool, "compatible", given.compatible),
    )


def _flag(tool: str, option: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ToolDefinitionError(tool, f"{option} must be True or False, got {value!r}")
    return value


def assemble(
    tool: str,
    options: Options,
    *,
    description: str,
    schema: dict[str, Any],
    fn: ToolFunction,
    verify: ToolFunction | None,
    check: ArgsCheck,
    call: Caller,
    verify_call: Caller | None,
    takes_ctx: bool,
) -> ToolSpec:
    """The ``ToolSpec`` of checked parts; its ``schema_hash`` covers the contract the model
    sees (name, version, description, input schema)."""
    schema_json = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    contract = {
        "name": tool,
        "version": options.version,
        "description": description,
        "input_schema": schema,
    }
    canonical = json.dumps(contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return ToolSpec(
        name=tool,
        version=options.version,
        description=description,
        policy=options.policy,
        approval=options.approval,
        approval_timeout=options.approval_timeout,
        on_approval_timeout=options.on_approval_timeout,
        fn=fn,
        verify=verify,
        schema_hash=hashlib.sha256(canonical.encode()).hexdigest(),
        timeout=options.timeout,
        retries=options.retries,
        retry_on=options.retry_on,
        cache_control=options.cache_control,
        compatible=options.compatible,
        _schema_json=schema_json,
        _check=check,
        _call=call,
        _verify_call=verify_call,
        _takes_ctx=takes_ctx,
    )


def _struct_check(tool: str, args: type[msgspec.Struct]) -> ArgsCheck:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        try:
            converted = msgspec.convert(value, args)
        except msgspec.ValidationError as exc:
            raise ToolArgumentsError(tool, str(exc)) from exc
        return {name: getattr(converted, name) for name in args.__struct_fields__}

    return check


def _keyword_caller(fn: ToolFunction, ctx_param: str | None) -> Caller:
    """Call ``fn`` with the checked arguments as keywords (and the context, if it takes one)."""

    def call(kwargs: dict[str, Any], ctx: ToolContext) -> Awaitable[Any]:
        if ctx_param is not None:
            kwargs = {**kwargs, ctx_param: ctx}
        return fn(**kwargs)

    return call


def _retry_options(
    tool: str,
    timeout: float | None,
    retries: int,
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
) -> tuple[float | None, int, tuple[type[BaseException], ...]]:
    """Check ``timeout``, ``retries`` and ``retry_on``; return them normalized."""
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ToolDefinitionError(
            tool, f"timeout must be a positive number of seconds, got {timeout!r}"
        )
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ToolDefinitionError(tool, f"retries must be a whole number >= 0, got {retries!r}")
    types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise ToolDefinitionError(tool, f"retry_on must hold exception types, got {kind!r}")
    if types and not retries:
        raise ToolDefinitionError(tool, "retry_on needs retries=N (how many more attempts)")
    return (None if timeout is None else float(timeout)), retries, types


def _cache_control(tool: str, value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ToolDefinitionError(
            tool, f'cache_control must be a dict like {{"type": "ephemeral"}}, got {value!r}'
        )
    try:
        plain: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(tool, f"cache_control is not JSON-able: {exc}") from exc
    return plain


def tool_name(fn: ToolFunction, name: str | None) -> str:
    if name is None:
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str):
            raise ToolDefinitionError(repr(fn), "has no __name__; pass name=")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolDefinitionError(
            str(name), "a tool name must be 1 to 64 letters, digits, '_' or '-'"
        )
    return name


def _choice(tool: str, option: str, enum: type[_E], value: str) -> _E:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in enum)
        raise ToolDefinitionError(
            tool, f"unknown {option} {value!r}; use one of {allowed}"
        ) from None


def _same_parameters(tool: str, want: dict[str, Any], got: dict[str, Any]) -> None:
    problems = [f"missing {name!r}" for name in want if name not in got]
    problems += [f"extra {name!r}" for name in got if name not in want]
    problems += [
        f"{name!r} is {type_name(got[name])}, the tool's is {type_name(hint)}"
        for name, hint in want.items()
        if name in got and got[name] != hint
    ]
    if problems:
        raise ToolDefinitionError(
            tool,
            "the verify function must take the same parameters as the tool: " + "; ".join(problems),
        )


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines())
