"""A crash-test scenario: one agent run, and how to read back what it did to the world.

A scenario is made by a factory ``scenario(root: Path) -> Scenario`` that a ``MODULE:NAME``
string points at, so that every child process can rebuild it from scratch; everything the
scenario keeps (its fake services, its side-effect ledger) lives in files under ``root``.

This module holds the scenario's side of the contract: ``Scenario`` itself, ``Pending`` (what a
scenario's ``decide`` sees when the run waits for a person), ``Awaited`` (what its ``deliver``
sees when a call waits for an event), ``Stranded`` (what its ``repin`` sees when a deploy left
the run parked for its contract), loading a factory from
``MODULE:NAME``, and checking a factory once before any case runs, so that a broken scenario
is reported as such and not as an unsafe agent.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from ..journal import Budgets, Decision, Repinned, Resolved, Signal, ToolPin
from ..models import Message, Model, SystemPrompt
from ..supervisor._verbs import repin_record
from ..tools import ToolRegistry


class CrashtestError(Exception):
    """The crash test could not run: a bad target, or a baseline run that failed."""


@dataclass(frozen=True)
class Pending:
    """A tool call the run waits on a person for, as a scenario's ``decide`` function sees it.

    Attributes:
        run_id, call_id, name, input: the call.
        escalated: ``True`` when the call was escalated (its outcome is unknown after a crash,
            the run is ``needs_attention``); ``False`` when it waits for approval.
        reason: why it was escalated (empty for an approval).
    """

    run_id: str
    call_id: str
    name: str
    input: Any
    escalated: bool
    reason: str = ""

    def approve(self, by: str = "crashtest", note: str = "") -> Decision:
        """Approve the call."""
        return Decision(call_id=self.call_id, approved=True, by=by, note=note)

    def reject(self, note: str = "", by: str = "crashtest") -> Decision:
        """Reject the call; the model gets ``note`` as an error result."""
        return Decision(call_id=self.call_id, approved=False, by=by, note=note)

    def succeeded(self, result: Any, by: str = "crashtest", note: str = "") -> Resolved:
        """Resolve an escalated call: it happened, and ``result`` is its result."""
        return Resolved(call_id=self.call_id, outcome="succeeded", result=result, by=by, note=note)

    def retry(self, by: str = "crashtest", note: str = "") -> Resolved:
        """Resolve an escalated call: it did not happen, run it again."""
        return Resolved(call_id=self.call_id, outcome="retry", by=by, note=note)

    def failed(self, note: str, by: str = "crashtest") -> Resolved:
        """Resolve an escalated call: it failed; the model gets ``note`` as an error result."""
        return Resolved(call_id=self.call_id, outcome="failed", by=by, note=note)


Decide: TypeAlias = Callable[[Pending], Decision | Resolved | None]
"""Answers a pending call with a ``Decision`` or ``Resolved`` record, or ``None`` to leave it."""


def approve_all(pending: Pending) -> Decision | None:
    """The default ``decide``: approve every call waiting for approval, resolve no escalation."""
    return None if pending.escalated else pending.approve()


@dataclass(frozen=True)
class Awaited:
    """A call that waits for an event no signal has answered yet (``tether.wait_for``), in the
    scenario's run or in one of its child runs, as a scenario's ``deliver`` function sees it.

    Attributes:
        run_id, call_id, name, input: the call.
        event: the event's name.
        until: when its wait times out (seconds since the epoch), or ``None``.
    """

    run_id: str
    call_id: str
    name: str
    input: Any
    event: str
    until: float | None = None

    def deliver(self, payload: Any = None, by: str = "crashtest") -> Signal:
        """The event happened, with ``payload``: the call's result. Its signal id is the
        call's, so a delivery repeated after a crash counts once."""
        signal_id = f"crashtest.{self.run_id}.{self.call_id}"
        return Signal(name=self.event, signal_id=signal_id, payload=payload, by=by)


Deliver: TypeAlias = Callable[[Awaited], Signal | None]
"""Delivers the event a call waits for (``Awaited.deliver``), or ``None`` to let it wait (until
its timeout, if it has one)."""


def deliver_nothing(awaited: Awaited) -> Signal | None:
    """The default ``deliver``: no event is ever delivered; waits end by their timeouts."""
    return None


@dataclass(frozen=True)
class Stranded:
    """A run parked for its contract (``needs_attention``): the process that resumed it
    after the scenario's ``deploy`` lacks a tool contract, the model or the parameters the run
    pinned. As a scenario's ``repin`` sees it.

    Attributes:
        run_id: the run.
        reason: what the process lacked, as the run's ``parked`` record says.
        tools: what accepting the deployed application's contracts pins: its latest version
            of each tool whose pinned contract it lacks (``operate`` and the console's
            ``repin_plan``).
        model: the deployed application's model and parameters, when they differ from the
            ones the run pinned; else ``None``.
    """

    run_id: str
    reason: str
    tools: tuple[ToolPin, ...] = ()
    model: tuple[str, dict[str, Any]] | None = None

    def repin(self, by: str = "crashtest", note: str = "") -> Repinned:
        """Accept the deployed application's contracts for the run: the ``repinned`` record
        ``tether repin`` writes (``tether.operate.repin``), recorded between two processes
        and checked as that command checks it (refused while a call of a repinned tool is
        open). The model is shown the new contracts from its next call on."""
        return repin_record(tools=self.tools, model=self.model, by=by, note=note)


Repin: TypeAlias = Callable[[Stranded], Repinned | None]
"""Answers a run parked for its contract with a ``repinned`` record (``Stranded.repin``), or
``None`` to leave it parked."""


def leave_parked(stranded: Stranded) -> Repinned | None:
    """The default ``repin``: nobody accepts a new contract; the run stays parked."""
    return None


def accept_contracts(stranded: Stranded) -> Repinned | None:
    """A ``repin`` that accepts the deployed application's contracts for every run parked
    for its contract, as ``tether repin RUN --app ... --by crashtest`` does."""
    return stranded.repin(note="accepted by the crash test's person")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One agent run to crash-test, made by a factory ``scenario(root: Path) -> Scenario``.

    The factory is called in every child process and in the test's own process, each time with
    the same ``root``: it must be cheap and must not touch the world (build services lazily or
    let them open their files on each call).

    Attributes:
        build: makes the model and the tools for one process. Everything they keep must live
            under ``root``: a killed process keeps nothing in memory.
        prompt: the user's message, or a list of messages.
        ledger: the side effects that really happened, read back from the files under
            ``root``: a ``Counter``/mapping of effect to count, or an iterable of effects (one
            item per occurrence). Reads and other repeatable calls belong outside it.
        run_id, system, budgets: what the run starts with.
        decide: answers the run when it waits for a person (see ``Pending``); by default
            every approval is granted and escalations are left as they are.
        deliver: delivers the events its calls wait for (see ``Awaited``), as the world
            would: between two processes, once the run rests waiting. By default nothing is
            delivered. Sleeps and child runs need nothing: a process waits for them (keep
            the sleeps of a scenario to seconds).
        deploy: deploys a changed application, once per case, in the harness's process:
            called the first time the run rests in flight (waiting for a person or an event,
            so it is pinned to the old contracts and holds no call in a process), before
            that rest is answered. It changes what ``build`` makes from then on (say, it
            writes the version to a file under ``root`` that ``build`` reads); every later
            process runs the new application. ``None`` (the default): no deploy.
        repin: answers a run the deployed application cannot continue, which its worker
            parked for its contract (see ``Stranded``): ``accept_contracts`` accepts the new
            contracts, as a person running ``tether repin`` would. By default it stays parked.
    """

    build: Callable[[], tuple[Model, ToolRegistry]]
    prompt: str | Sequence[Message]
    ledger: Callable[[], Mapping[str, int] | Iterable[str]]
    run_id: str = "crashtest"
    system: SystemPrompt = None
    budgets: Budgets | None = None
    decide: Decide = approve_all
    deliver: Deliver = deliver_nothing
    deploy: Callable[[], None] | None = None
    repin: Repin = leave_parked


ScenarioFactory: TypeAlias = Callable[[Path], Scenario]


def ledger_of(scenario: Scenario) -> Counter[str]:
    """The scenario's side effects as a ``Counter`` of effect to count, read from its files."""
    found = scenario.ledger()
    if isinstance(found, Mapping):
        return Counter({str(k): int(v) for k, v in found.items() if int(v)})
    return Counter(str(item) for item in found)


def load_target(target: str) -> ScenarioFactory:
    """The factory ``MODULE:NAME`` names (``NAME`` may be dotted).

    Raises:
        CrashtestError: the string is malformed, or the module or name cannot be found.
    """
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise CrashtestError(f"expected MODULE:SCENARIO, got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CrashtestError(
            f"cannot import {module_name!r}: {exc} (looked on the path, which starts with the "
            f"current directory {os.getcwd()}: run from the directory that holds the module)"
        ) from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CrashtestError(f"{module_name!r} has no {qualname!r}") from None
    if not callable(obj):
        raise CrashtestError(f"{target} is not a scenario factory (a callable taking a root)")
    factory: ScenarioFactory = obj
    return factory


def resolve_target(target: str | ScenarioFactory) -> tuple[str, ScenarioFactory, list[str]]:
    """The target as ``MODULE:NAME``, its factory, and the directories a child needs on its
    path to import it.

    Raises:
        CrashtestError: a string ``load_target`` refuses, or a factory a child cannot import
            (defined in ``__main__`` or inside a function).
    """
    if isinstance(target, str):
        spec, factory = target, load_target(target)
    else:
        module = getattr(target, "__module__", None)
        qualname = getattr(target, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise CrashtestError(
                f"{target!r} cannot be imported by a child process: define the factory at "
                "module level in an importable module, or pass 'MODULE:NAME'"
            )
        spec, factory = f"{module}:{qualname}", target
    module_name = spec.partition(":")[0]
    paths: list[str] = []
    mod = sys.modules.get(module_name)
    file = getattr(mod, "__file__", None)
    if file:
        base = Path(file).resolve().parent
        if Path(file).name == "__init__.py":
            base = base.parent
        for _ in range(module_name.count(".")):
            base = base.parent
        paths.append(str(base))
    paths.append(os.getcwd())
    paths.append(str(Path(__file__).resolve().parents[2]))  # where tether itself is (src/)
    return spec, factory, paths


def check_scenario(spec: str, factory: ScenarioFactory) -> Scenario:
    """Make the scenario once, in a scratch directory, so that a broken one is reported as
    such (exit 2 on the command line), not as an unsafe agent; return it (its scratch
    directory is gone).

    Raises:
        CrashtestError: the factory raises or returns something else than a ``Scenario``,
            ``build`` or ``ledger`` is not callable, ``build()`` raises or does not return
            ``(model, tools)`` (before or after the scenario's ``deploy()``), ``deploy()``
            raises, or ``ledger()`` raises.
    """
    with tempfile.TemporaryDirectory(prefix="tether-crashtest-check-") as scratch:
        try:
            scenario = factory(Path(scratch))
        except Exception as exc:
            raise CrashtestError(
                f"the scenario factory {spec} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(scenario, Scenario):
            raise CrashtestError(
                f"the scenario factory {spec} returned {type(scenario).__name__}, not a "
                "tether.testing.Scenario"
            )
        for name in ("build", "ledger"):
            if not callable(getattr(scenario, name)):
                kind = type(getattr(scenario, name)).__name__
                raise CrashtestError(
                    f"Scenario.{name} must be a function (called in each process), not a {kind}"
                )
        if scenario.deploy is not None and not callable(scenario.deploy):
            kind = type(scenario.deploy).__name__
            raise CrashtestError(f"Scenario.deploy must be a function or None, not a {kind}")
        _check_build(scenario, "")
        if scenario.deploy is not None:
            try:
                scenario.deploy()
            except Exception as exc:
                raise CrashtestError(
                    f"the scenario's deploy() raised {type(exc).__name__}: {exc}"
                ) from exc
            _check_build(scenario, " after its deploy()")
        try:
            ledger_of(scenario)
        except Exception as exc:
            raise CrashtestError(
                f"the scenario's ledger() raised {type(exc).__name__}: {exc}"
            ) from exc
    return scenario


def _check_build(scenario: Scenario, when: str) -> None:
    try:
        built = scenario.build()
    except Exception as exc:
        raise CrashtestError(
            f"the scenario's build(){when} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], ToolRegistry)):
        raise CrashtestError(
            f"the scenario's build(){when} must return (model, tools), a model and a ToolRegistry"
        )
