"""The manifest: what a run pins when it starts, and what a resumed run finds changed."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

from ..journal._records import Manifest, Retried
from ..models._base import SystemPrompt
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


def _system_hash(system: str | list[dict[str, Any]] | None) -> str:
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


def manifest_problem(rt: Runtime, manifest: Manifest) -> str | None:
    """What a resumed run pinned that this process cannot honour, or ``None``."""
    if manifest.model != rt.model.name:
        return (
            f"pinned model {manifest.model!r} is not available (this process has {rt.model.name!r})"
        )
    params = msgspec.json.decode(msgspec.json.encode(rt.model.params))
    if manifest.model_params != params:
        return (
            f"model parameters changed: pinned {manifest.model_params!r}, "
            f"this process has {params!r}"
        )
    if manifest.system_hash != _system_hash(manifest.system_prompt):
        return "the pinned system prompt does not match its hash"
    if rt.strict_app_version and manifest.app_version != rt.app_version:
        return (
            f"pinned app version {manifest.app_version!r} is not this process's "
            f"({rt.app_version!r})"
        )
    for pin in manifest.tools:
        if (pin.name, pin.version) not in rt.tools:
            return f"pinned tool {pin.name!r} version {pin.version!r} is not registered"
        spec = rt.tools.get(pin.name, pin.version)
        if spec.schema_hash != pin.schema_hash:
            return (
                f"tool {pin.name!r} version {pin.version!r} changed its contract "
                f"(schema hash {spec.schema_hash[:12]}, pinned {pin.schema_hash[:12]}); "
                "register the old contract under its version or give the new one a new version"
            )
    return None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
