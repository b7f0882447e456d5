"""What a deploy would do to the runs in flight: which of them an application can continue.

Every unfinished run pinned the model, parameters and tool contracts it started with (its
manifest, as ``repinned`` records changed it since). An application can continue a run if it
has every one of those contracts, or one its tool declares a compatible successor of
(``tools.incompatibility``); otherwise a worker of that application parks the run for a person.
``check_runs`` says which, run by run, before the deploy: ``tether check --app`` prints it, and
``tether.testing.check_deploy`` asserts it in a test, against a copy of production's store or
recorded journals. It also says which registered tool versions no unfinished run needs any more
(an old version kept for old runs can go once none pins it).

The comparison is the runtime's own (``supervisor._manifest.contract_changes``), so what is
predicted here is what a worker of that application would do.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..journal import RunStore, ToolPin
from ..supervisor import RunState, fold
from ..supervisor._contracts import (
    Advertising,
    Change,
    Contracts,
    contract_changes,
    decode_contracts,
)
from ..supervisor._verbs import answer_problem, repin_record

if TYPE_CHECKING:
    from ..supervisor import WorkerApp


@dataclass(frozen=True)
class RunCheck:
    """One unfinished run, judged against an application.

    Attributes:
        run_id: the run.
        changes: every way the application differs from what the run pinned.
        open_calls: calls of changed tools not finished in the model's turn (a contract never
            changes under one).
    """

    run_id: str
    changes: tuple[Change, ...] = ()
    open_calls: tuple[str, ...] = ()

    @property
    def continues(self) -> bool:
        """Whether a worker of the application continues the run (perhaps after taking over
        a compatible change, recorded as ``repinned``)."""
        return all(c.takes_over for c in self.changes) and not self.open_calls

    @property
    def repins(self) -> bool:
        """Whether it continues only by taking over a compatible change."""
        return self.continues and bool(self.changes)


@dataclass(frozen=True)
class DeployCheck:
    """What an application would do to every unfinished run of a store.

    Attributes:
        runs: each unfinished run, in id order.
        unused: ``(tool, version)`` registered by the application, not its latest version of
            that tool, and pinned by no unfinished run: safe to drop.
    """

    runs: tuple[RunCheck, ...] = ()
    unused: tuple[tuple[str, str], ...] = field(default=())

    @property
    def stranded(self) -> tuple[RunCheck, ...]:
        """The runs a worker of the application would park for a person."""
        return tuple(r for r in self.runs if not r.continues)

    @property
    def ok(self) -> bool:
        """Whether the application strands no run."""
        return not self.stranded

    def lines(self) -> list[str]:
        """The report in words, as ``tether check`` prints it: each run, what stops those it
        would strand (old and new input schema side by side), the totals, the unused
        versions."""
        out: list[str] = []
        for run in self.runs:
            if run.continues:
                how = "continues, taking over a compatible change" if run.repins else "continues"
                out.append(f"{run.run_id}: {how}")
                continue
            out.append(f"{run.run_id}: would stop")
            for change in run.changes:
                out.append(f"  - {change.text}")
                out.extend(f"      {line}" for line in _schemas(change))
            for call in run.open_calls:
                out.append(f"  - call {call} of a changed tool is not finished")
        stranded, repins = len(self.stranded), sum(r.repins for r in self.runs)
        total = len(self.runs)
        out.append(
            f"{total} unfinished run(s): {total - stranded} can continue"
            + (f" ({repins} after a compatible change)" if repins else "")
            + f", {stranded} would stop"
        )
        for name, version in self.unused:
            out.append(f"tool {name} version {version}: no unfinished run needs it any more")
        return out

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (``tether check --json``)."""
        return {
            "ok": self.ok,
            "runs": [_run_dict(r) for r in self.runs],
            "stranded": [r.run_id for r in self.stranded],
            "unused": [{"tool": name, "version": version} for name, version in self.unused],
        }


def _run_dict(run: RunCheck) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "continues": run.continues,
        "repins": run.repins,
        "changes": [
            {
                "what": c.what,
                "text": c.text,
                "tool": c.pinned.name if c.pinned is not None else None,
                "pinned_schema": c.pinned.input_schema if c.pinned is not None else None,
                "new_schema": c.current.input_schema if c.current is not None else None,
                "takes_over": c.takes_over,
            }
            for c in run.changes
        ],
        "open_calls": list(run.open_calls),
    }


def _schemas(change: Change) -> list[str]:
    """The pinned and the new contract side by side (a unified diff), where both are known."""
    if change.pinned is None or change.current is None:
        return []
    if change.pinned.input_schema is None:
        return ["(the run's pin predates recorded contracts: its schema is not known)"]
    old = _pretty({"description": change.pinned.description, **change.pinned.input_schema})
    new = _pretty({"description": change.current.description, **change.current.input_schema})
    return list(difflib.unified_diff(old, new, "pinned", "this application", lineterm="", n=2))


def _pretty(value: dict[str, Any]) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True).splitlines()


def check_runs(states: Iterable[RunState], app: WorkerApp) -> DeployCheck:
    """Judge the unfinished runs among ``states`` (folded journals) against ``app``."""
    options = app.options
    strict = bool(options.get("strict_app_version", False))
    version = str(options.get("app_version", ""))
    runs: list[RunCheck] = []
    needed: set[tuple[str, str]] = set()
    for state in states:
        if state.started is None or state.finished is not None:
            continue
        changes = contract_changes(
            state.manifest,
            model=app.model,
            tools=app.tools,
            app_version=version,
            strict_app_version=strict,
        )
        needed.update((pin.name, pin.version) for pin in state.manifest.tools)
        changed = {c.pinned.name for c in changes if c.pinned is not None}
        open_calls = tuple(c.id for c in state.calls.values() if c.name in changed and not c.done)
        runs.append(RunCheck(state.run_id, tuple(changes), open_calls))
    unused = tuple(
        (spec.name, version)
        for spec in app.tools
        for version in app.tools.versions(spec.name)[:-1]
        if (spec.name, version) not in needed
    )
    return DeployCheck(tuple(sorted(runs, key=lambda r: r.run_id)), unused)


async def check_deploy(store: RunStore, app: WorkerApp) -> DeployCheck:
    """What deploying ``app`` would do to the unfinished runs of ``store`` (read without
    taking any run): ``check_runs`` over every run. The application's tool sources (MCP
    servers, an agent framework's tools) are opened for it, as a worker opens them, and
    closed again (an opening already held is shared: ``ToolRegistry.open_sources``).

    Raises:
        JournalCorruptError, OSError, ...: a run cannot be read (nothing can be promised of it).
        Exception: what a tool source raised while it opened (``ToolUnavailableError``).
    """
    states = [fold(await store.read(run_id)) for run_id in await store.list_runs()]
    async with app.tools.open_sources():
        return check_runs(states, app)


def repin_plan(
    state: RunState, contracts: Contracts
) -> tuple[list[ToolPin], tuple[str, dict[str, Any]] | None]:
    """What moving run ``state`` to a worker's ``contracts`` takes: the pins (that worker's
    latest version of each pinned tool it lacks as pinned) and the model (name, parameters)
    when that differs; both empty when the worker can run it as it is."""
    manifest = state.manifest
    have = {(p.name, p.version, p.schema_hash) for p in contracts.tools}
    pins = [
        latest
        for pin in manifest.tools
        if (pin.name, pin.version, pin.schema_hash) not in have
        and (latest := contracts.latest(pin.name)) is not None
    ]
    model = None
    if (manifest.model, manifest.model_params) != (contracts.model, contracts.model_params):
        model = (contracts.model, dict(contracts.model_params))
    return pins, model


async def fleet_of(store: object) -> dict[str, Contracts]:
    """The live workers of ``store`` and what each can run (none for a store without them)."""
    if not isinstance(store, Advertising):
        return {}
    ads = await store.advertised()
    return {key: c for key, data in ads.items() if (c := decode_contracts(data)) is not None}


def offers(
    state: RunState, fleet: dict[str, Contracts], now: float | None = None
) -> list[dict[str, Any]]:
    """For a run parked for its contract: each live worker it could go on with, once a person
    accepts that worker's contracts (``tether repin``), what would change, and why such a
    repin is refused now (``refused``, else ``None``)."""
    now = time.time() if now is None else now
    parked = state.parked
    if parked is None or parked.cause != "contract" or state.finished is not None:
        return []
    out = []
    for key, contracts in sorted(fleet.items()):
        pins, model = repin_plan(state, contracts)
        names = {pin.name for pin in contracts.tools}
        if any(pin.name not in names for pin in state.manifest.tools):
            continue  # that worker lacks a tool the run pinned altogether
        changes = [f"{p.name} v{p.version} ({p.schema_hash[:12]})" for p in pins]
        if model is not None:
            changes.append(f"model {model[0]}")
        if changes:
            # Refused now, for what the run has in flight (a call of a changed tool still
            # open): said instead of offered, so nobody is given a form that is then refused.
            record = repin_record(tools=pins, model=model, by="")
            refused = answer_problem(state, record, now)
            out.append({"worker": key, "changes": changes, "refused": refused})
    return out
