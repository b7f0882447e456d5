"""The workers serving one store, and the contracts each can honour: so that during a rolling
deploy a worker leaves a run it cannot continue to one that can, instead of parking it.

Each supervisor that resumes runs (a worker) advertises its application's contracts in the
store while it runs (``Fleet.enter``/``leave``): the model and its parameters, the app version
when it is strict about it, and every registered tool version with its schema hash, whether
it declares itself compatible, and its input schema. A worker that finds a run whose pinned
contracts it lacks asks the fleet (``Fleet.taker``) whether another live worker has them; if so
it leaves the run for that worker, and says so, rather than parking it for a person. Only when
no live worker can continue it is the run parked (journaled, shown everywhere).

The advertisements are advisory: a worker that dies leaves one that the store forgets (a
directory store: when the process's lock on its file goes; PostgreSQL: when it is not renewed).
A run left for a worker that then goes away is found by the next sweep again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import msgspec

from ..journal import Manifest, ToolPin
from ..journal._records import JSONValue
from ..tools._compat import incompatibility

if TYPE_CHECKING:
    from ..models import Model
    from ..tools import ToolRegistry
    from ._runtime import Runtime

log = logging.getLogger("tether.supervisor")

LOOK_AGAIN = 1.0
"""Seconds the fleet's advertisements are reused before the store is read again."""
LEAVE_TIMEOUT = 2.0
"""Seconds taking the advertisement back may take (a database out of reach: it expires)."""


class Contracts(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker's application can honour: its model, and every tool version it registers
    (as the pin a run would hold of it), with the ones it declares compatible."""

    model: str
    model_params: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    tools: list[ToolPin] = msgspec.field(default_factory=list)
    compatible: list[tuple[str, str]] = msgspec.field(default_factory=list)
    app_version: str = ""
    strict_app_version: bool = False

    def latest(self, name: str) -> ToolPin | None:
        """The pin of tool ``name``'s latest version here (the registry's order), if any."""
        found = [pin for pin in self.tools if pin.name == name]
        return found[-1] if found else None


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Contracts)


def contracts_of(rt: Runtime) -> Contracts:
    """The contracts this process's runtime can honour."""
    return contracts_for(
        rt.model,
        rt.tools,
        app_version=rt.app_version,
        strict_app_version=rt.strict_app_version,
    )


def contracts_for(
    model: Model,
    tools: ToolRegistry,
    *,
    app_version: str = "",
    strict_app_version: bool = False,
) -> Contracts:
    """The contracts an application (``model``, ``tools``) can honour: what its workers
    advertise, and what a repin to it accepts (``operate._deploy.repin_plan``)."""
    specs = [
        tools.get(spec.name, version) for spec in tools for version in tools.versions(spec.name)
    ]
    return Contracts(
        model=model.name,
        model_params=msgspec.json.decode(msgspec.json.encode(model.params)),
        tools=[s.pin() for s in specs],
        compatible=[(s.name, s.version) for s in specs if s.compatible],
        app_version=app_version,
        strict_app_version=strict_app_version,
    )


def honours(contracts: Contracts, manifest: Manifest) -> bool:
    """Whether a worker with ``contracts`` can continue a run that pinned ``manifest`` (as
    ``_manifest.contract_changes`` would find: nothing that is not a compatible takeover)."""
    if manifest.model != contracts.model or manifest.model_params != contracts.model_params:
        return False
    if contracts.strict_app_version and manifest.app_version != contracts.app_version:
        return False
    have = {(t.name, t.version): t for t in contracts.tools}
    compatible = {tuple(c) for c in contracts.compatible}
    for pin in manifest.tools:
        tool = have.get((pin.name, pin.version))
        if tool is None:
            return False
        if tool.schema_hash == pin.schema_hash:
            continue
        if (pin.name, pin.version) not in compatible or tool.input_schema is None:
            return False
        if incompatibility(pin.input_schema, tool.input_schema) is not None:
            return False
    return True


@runtime_checkable
class Advertising(Protocol):
    """A store where workers say what they can honour (``FileStore``, ``PostgresStore``)."""

    async def advertise(self, key: str, data: bytes | None) -> None:
        """Keep ``data`` under ``key`` while this process lives (``None``: take it back)."""
        ...

    async def advertised(self) -> dict[str, bytes]:
        """Every live worker's advertisement, by key."""
        ...


def decode_contracts(data: bytes) -> Contracts | None:
    """An advertisement's contracts (``None``: damaged, or from a newer tether)."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class Fleet:
    """This supervisor's place among the workers of its store.

    Args:
        store: the store (any store without ``advertise`` simply has no fleet).
        rt: this supervisor's runtime (what it advertises).
    """

    def __init__(self, store: object, rt: Runtime) -> None:
        self._store = store if isinstance(store, Advertising) else None
        self._rt = rt
        self.key = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._seen: dict[str, Contracts] = {}
        self._seen_at = -LOOK_AGAIN
        self._entered = False

    async def enter(self) -> None:
        """Say what this worker can honour (best effort: a store that fails says nothing)."""
        store = self._store
        if store is None:
            return
        try:
            await store.advertise(self.key, _ENCODER.encode(contracts_of(self._rt)))
            self._entered = True
        except Exception as exc:
            log.warning("could not tell the other workers what this one can run (%s)", exc)

    async def leave(self) -> None:
        """Take this worker's advertisement back (best effort)."""
        store = self._store
        if store is None or not self._entered:
            return
        self._entered = False
        try:
            # Shielded: a supervisor left by a cancellation (a ``move_on_after`` around it)
            # must not leave its advertisement (a file's lock, a row) saying it is alive.
            with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_TIMEOUT):
                await store.advertise(self.key, None)
        except Exception as exc:
            log.debug("could not take the advertisement back (%s)", exc)

    async def taker(self, manifest: Manifest) -> str | None:
        """Another live worker that can continue a run pinned to ``manifest``, if any."""
        store = self._store
        if store is None:
            return None
        now = time.monotonic()
        if now - self._seen_at >= LOOK_AGAIN:
            try:
                ads = await store.advertised()
            except Exception as exc:
                log.warning("could not read what the other workers can run (%s)", exc)
                ads = {}
            seen = {key: c for key, data in ads.items() if (c := decode_contracts(data))}
            self._seen, self._seen_at = seen, now
        for key, contracts in self._seen.items():
            if key != self.key and honours(contracts, manifest):
                return key
        return None
