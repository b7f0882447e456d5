"""The manifest: what a run pins when it starts, and what a resumed run finds changed."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ..journal import Manifest, Repinned, Retried, ToolPin
from ..models import Model, SystemPrompt
from ..tools import ToolRegistry, ToolSpec
from ..tools._compat import incompatibility
from ._state import RunState

if TYPE_CHECKING:
    from ._runtime import Runtime


def build_manifest(
    rt: Runtime, *, system: SystemPrompt, app_version: str, tools: list[Any] | None = None
) -> Manifest:
    """The manifest a new run pins: model, parameters, system prompt, tool contracts, app.

    Raises:
        TypeError: ``system`` is neither text, nor a list of text blocks, nor ``None``.
    """
    blocks = _system_blocks(system)
    return Manifest(
        model=rt.model.name,
        model_params=dict(rt.model.params),
        system=None if blocks is not None else system if isinstance(system, str) else None,
        system_blocks=blocks,
        system_hash=_system_hash(system if blocks is None else blocks),
        tools=rt.tools.pins() if tools is None else tools,
        app_version=app_version,
    )


def system_of(manifest: Manifest) -> SystemPrompt:
    """The system prompt a run pinned, as its model is given it (checked when the run
    started: text, text blocks or none)."""
    return cast("SystemPrompt", manifest.system_prompt)


def _system_blocks(system: SystemPrompt) -> list[dict[str, Any]] | None:
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list) or not all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in system
    ):
        raise TypeError(
            "system must be text or a list of text blocks "
            '({"type": "text", "text": ..., "cache_control": ...})'
        )
    copied: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(system))
    return copied


def _system_hash(system: str | Sequence[Mapping[str, object]] | None) -> str:
    if system is None or isinstance(system, str):
        return _sha256(system or "")
    return _sha256(msgspec.json.encode(system).decode())


CONTRACT = "contract"
"""The ``cause`` of a ``parked`` record written because a process could not honour the model,
system prompt, app version or tool contracts the run pinned."""


def contract_found(rt: Runtime) -> Retried:
    """The record that sends on a run parked for its contract, written by a process that has
    the contract (a rolled-back deploy, or a worker of the old version beside the new)."""
    return Retried(
        note=f"continued by {rt.host} pid {os.getpid()}, which has the run's pinned contracts"
    )


@dataclass(frozen=True)
class Change:
    """One way an application differs from the contracts a run pinned.

    Attributes:
        what: ``"model"``, ``"model_params"``, ``"system_prompt"``, ``"app_version"``,
            ``"tool_missing"`` or ``"tool_changed"``.
        text: the change in words, with what to do about it.
        pinned: for a tool, the pin the run holds.
        current: for a changed tool, this application's contract of that name and version.
        takes_over: a changed tool that declares itself ``compatible`` and whose change keeps
            every call the pin allowed valid: the run can go on under it, repinned, with no
            person (``incompatibility`` is the rule).
    """

    what: str
    text: str
    pinned: ToolPin | None = None
    current: ToolSpec | None = None
    takes_over: bool = False


def contract_changes(
    manifest: Manifest,
    *,
    model: Model,
    tools: ToolRegistry,
    app_version: str = "",
    strict_app_version: bool = False,
) -> list[Change]:
    """Every way an application (``model``, ``tools``, ``app_version``) differs from what a
    run pinned in ``manifest``: the one comparison behind a resumed run's check, ``tether
    check`` and ``tether repin``."""
    changes: list[Change] = []
    if manifest.model != model.name:
        changes.append(
            Change(
                "model",
                f"pinned model {manifest.model!r} is not available (this process has "
                f"{model.name!r})",
            )
        )
    else:
        params = msgspec.json.decode(msgspec.json.encode(model.params))
        if manifest.model_params != params:
            changes.append(
                Change(
                    "model_params",
                    f"model parameters changed: pinned {manifest.model_params!r}, "
                    f"this process has {params!r}",
                )
            )
    if manifest.system_hash != _system_hash(manifest.system_prompt):
        changes.append(Change("system_prompt", "the pinned system prompt does not match its hash"))
    if strict_app_version and manifest.app_version != app_version:
        changes.append(
            Change(
                "app_version",
                f"pinned app version {manifest.app_version!r} is not this process's "
                f"({app_version!r})",
            )
        )
    for pin in manifest.tools:
        if (pin.name, pin.version) not in tools:
            has = tools.versions(pin.name) if pin.name in tools else ()
            also = f" (this process has version(s) {', '.join(has)})" if has else ""
            changes.append(
                Change(
                    "tool_missing",
                    f"pinned tool {pin.name!r} version {pin.version!r} is not registered{also}",
                    pinned=pin,
                )
            )
            continue
        spec = tools.get(pin.name, pin.version)
        if spec.schema_hash == pin.schema_hash:
            continue
        why = incompatibility(pin.input_schema, spec.input_schema) if spec.compatible else None
        if spec.compatible and why is None:
            text = (
                f"tool {pin.name!r} version {pin.version!r} changed its contract compatibly "
                f"(schema hash {spec.schema_hash[:12]}, pinned {pin.schema_hash[:12]})"
            )
            changes.append(Change("tool_changed", text, pin, spec, takes_over=True))
            continue
        declared = f"; it is declared compatible, but {why}" if spec.compatible else ""
        changes.append(
            Change(
                "tool_changed",
                f"tool {pin.name!r} version {pin.version!r} changed its contract "
                f"(schema hash {spec.schema_hash[:12]}, pinned {pin.schema_hash[:12]}){declared}"
                "; register the old contract under its version or give the new one a new "
                "version, or let the run go on under the new one (tether repin)",
                pin,
                spec,
            )
        )
    return changes


def changes_for(rt: Runtime, manifest: Manifest) -> list[Change]:
    """``contract_changes`` between ``manifest`` and this process's runtime."""
    return contract_changes(
        manifest,
        model=rt.model,
        tools=rt.tools,
        app_version=rt.app_version,
        strict_app_version=rt.strict_app_version,
    )


def manifest_problem(rt: Runtime, manifest: Manifest) -> str | None:
    """What a resumed run pinned that this process cannot honour, or ``None`` (a compatible
    tool change is no problem: the run takes it over, repinned, when it goes on)."""
    blocking = [c.text for c in changes_for(rt, manifest) if not c.takes_over]
    return "; ".join(blocking) or None


def contract_decision(state: RunState, rt: Runtime) -> tuple[str | None, Repinned | None]:
    """What a drive does about the contracts run ``state`` pinned: the problem to park it for
    (``None``: none), or else the ``repinned`` record that takes over the tools that changed
    compatibly (``None``: nothing changed).

    A compatible change is taken over only while no call of that tool is open in the
    model's turn: a contract never changes under a call that was started, approved or
    waits for one under the old one.
    """
    changes = changes_for(rt, state.manifest)
    problems: list[str] = []
    pins: list[ToolPin] = []
    for change in changes:
        if not change.takes_over:
            problems.append(change.text)
            continue
        assert change.current is not None
        name = change.current.name
        open_call = next((c for c in state.calls.values() if c.name == name and not c.done), None)
        if open_call is not None:
            problems.append(
                f"{change.text}, but call {open_call.id!r} of it is not finished, and a contract "
                "does not change under a call: resolve or cancel it"
            )
            continue
        pins.append(change.current.pin())
    if problems:
        return "; ".join(problems), None
    if not pins:
        return None, None
    names = ", ".join(f"{p.name} v{p.version}" for p in pins)
    note = (
        f"compatible change of {names} taken over by {rt.host} pid {os.getpid()} "
        "(the tool declares compatible=True, and every call its pin allowed is still valid)"
    )
    return None, Repinned(tools=pins, note=note)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
