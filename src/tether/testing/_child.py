"""One process of a crash-test case: the only code that runs in a child.

``python -m tether.testing MODULE:NAME --root DIR --step start|resume [--store URL]
[--schema NAME] [--flat] [--timeline]``

``start`` creates the run and drives it; ``resume`` lets a ``Supervisor`` resume unfinished
runs on entry, as a worker restarted after a crash does. Either waits until the run rests where
only the world can move it on (sleeps and child runs are waited out; see ``_rest``) and prints
its status as the last line (``tether-crashtest-status: {...}``). The crash-point killer
is armed from the environment (``TETHER_CRASH_AT``, ``TETHER_CRASH_TRACE``) by the runtime's
failpoints themselves, so a child holds nothing that a killed process would not.

Under the case's directory ``DIR``: ``world/`` is the scenario's root and ``store/`` the run's
``FileStore`` (with ``--flat`` both are ``DIR`` itself, the layout of ``tether demo``'s root);
``model_calls.log`` gets one line per model answer, written before the answer is returned, so
that a killed process's calls count too. With ``--store`` (by default the
``TETHER_CRASHTEST_STORE`` variable, which keeps a password off the command line) the run lives
in that PostgreSQL database, in schema ``NAME``. With ``--timeline`` the child prints the
journal events it writes (see ``Narrator``) and the run's status when it rests.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from .._errors import JournalLockedError, RunNotFoundError
from .._failpoints import Hook, killer_from_environment, set_hook
from .._store_url import is_postgres, store_for
from ..journal import FileStore, Store
from ..models import Message, Model, ModelReply, SystemPrompt, ToolDefinition
from ..supervisor import RunStatus, Supervisor, fold, run_status
from ._scenario import Scenario, load_target
from ._timeline import Narrator

CHILD_TIMEOUT_S = 60.0
"""How long one child process may take to bring the run to a rest."""

PG_LEASE_TTL = 10.0
"""Seconds a child's lease on a PostgreSQL run lasts. The harness ends a killed child's leases
itself (``CaseStore.buried``), so this is only what a child's stalls (a loaded machine, a
framework's first import on the event loop) must not outlast: a lease that ran out would be
the child's own run taken back from itself, mid-call."""

STORE_ENV = "TETHER_CRASHTEST_STORE"
"""The variable that gives children the PostgreSQL URL of the cases' runs."""

STATUS_MARK = "tether-crashtest-status: "
"""What starts the line a child reports its run's status on (its last line)."""

MODEL_CALLS_LOG = "model_calls.log"
"""The file in a case's directory that gets one line per model answer."""


def case_dirs(case: Path, *, flat: bool) -> tuple[Path, Path]:
    """The scenario's root and the ``FileStore``'s root in the case directory ``case``."""
    if flat:
        return case, case
    return case / "world", case / "store"


class _CountingModel:
    """Wraps a scenario's model: one line per answer appended to a log, before it is returned
    (so the answer is counted even if the process is killed right after)."""

    def __init__(self, inner: Model, log: Path) -> None:
        self._inner = inner
        self._log = log

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def params(self) -> dict[str, Any]:
        return self._inner.params

    async def __call__(
        self,
        *,
        system: SystemPrompt,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> ModelReply:
        reply = await self._inner(system=system, messages=messages, tools=tools)
        fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return reply


def child_main(argv: Sequence[str]) -> int:
    """Run one process of a case, as the module docstring says.

    Returns:
        0 when the run rests, 1 otherwise (argparse exits 2 on bad usage).
    """
    parser = argparse.ArgumentParser(prog="python -m tether.testing")
    parser.add_argument("target", metavar="MODULE:SCENARIO")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--step", required=True, choices=("start", "resume"))
    parser.add_argument("--store", metavar="URL", default=os.environ.get(STORE_ENV) or None)
    parser.add_argument("--schema", metavar="NAME", default="tether")
    parser.add_argument("--flat", action="store_true")
    parser.add_argument("--timeline", action="store_true")
    args = parser.parse_args(list(argv))
    if args.store is not None and not is_postgres(args.store):
        parser.error(f"--store: expected a postgresql:// URL, got {args.store!r}")
    if args.store is not None and args.timeline:
        parser.error("--timeline reads the run's journal file: it needs a file store")
    factory = load_target(args.target)
    root: Path = args.root
    world, files = case_dirs(root, flat=args.flat)
    world.mkdir(parents=True, exist_ok=True)
    scenario = factory(world)
    narrator = None
    store: Store
    if args.store is None:
        store = file_store = FileStore(files)
        if args.timeline:
            narrator = Narrator(file_store.location(scenario.run_id), _say)
            set_hook(_narrating(killer_from_environment(), narrator))
    else:
        store = store_for(args.store, schema=args.schema, lease_ttl=PG_LEASE_TTL)
    status = anyio.run(_child, scenario, root, store, args.step, narrator)
    if narrator is not None:
        reason = f" ({status['reason']})" if status["reason"] else ""
        _say(f"status: {status['status']}{reason}")
    print(STATUS_MARK + json.dumps(status), flush=True)
    return 0 if status["status"] != RunStatus.RUNNING.value else 1


def _say(line: str) -> None:
    print(line, flush=True)


def _narrating(killer: Hook | None, narrator: Narrator) -> Hook:
    """The failpoint hook of a ``--timeline`` child: the killer first (a kill at this point
    leaves what was saved just before it unshown, for the parent to mark), then the narrator."""

    def hook(point: str) -> None:
        if killer is not None:
            killer(point)
        narrator(point)

    return hook


async def _claimable(store: Store, run_id: str) -> None:
    """Wait until run ``run_id`` can be claimed (or does not exist).

    A killed process leaves its lease on a PostgreSQL run live until it runs out; a
    ``Supervisor`` entered before that would see the run as another worker's and not resume it.
    """
    with anyio.fail_after(CHILD_TIMEOUT_S):
        while True:
            try:
                journal = await store.open(run_id)
            except JournalLockedError:
                await anyio.sleep(0.05)
                continue
            except RunNotFoundError:
                return
            await journal.aclose()
            return


async def _child(
    scenario: Scenario, root: Path, store: Store, step: str, narrator: Narrator | None
) -> dict[str, Any]:
    model, tools = scenario.build()
    counting = _CountingModel(model, root / MODEL_CALLS_LOG)
    run_id = scenario.run_id
    async with store:
        if step == "resume" and not isinstance(store, FileStore):
            await _claimable(store, run_id)
        if step == "resume" and narrator is not None:
            narrator.loaded(await store.read(run_id))
        async with Supervisor(store, model=counting, tools=tools) as sup:
            if step == "start":
                await sup.start(
                    run_id, scenario.prompt, system=scenario.system, budgets=scenario.budgets
                )
            with anyio.fail_after(CHILD_TIMEOUT_S):
                status, awaited, others = await _rest(sup, store, run_id)
            view = await sup.inspect(run_id)
    if narrator is not None:
        narrator.show()  # what was written after the last failpoint, up to the run's rest
    return {
        "status": status.value,
        "reason": view.reason,
        "pending": list(view.pending),
        "awaited": awaited,
        "others": others,
    }


async def _rest(
    sup: Supervisor, store: Store, run_id: str
) -> tuple[RunStatus, list[dict[str, Any]], dict[str, list[str]]]:
    """Wait until the run rests where only the world can move it on: finished, waiting for a
    person, or waiting for an event in it or one of its child runs. A sleep or a child run at
    work is waited out here, as a worker would (the supervisor wakes the run).

    Returns its status, the calls waiting for an event no signal answered (as ``Awaited``
    fields), and the other runs of the store that wait for a person (run id: pending calls).
    """
    while True:
        status = await sup.wait(run_id)
        if status is not RunStatus.SLEEPING:
            return status, [], {}
        world = await _world(store)
        awaited, others = world
        if awaited or others:
            # What the journals say may be ahead of the runs (a wait just journaled, its run
            # not at rest yet): the answer holds once every run it names rests here.
            for run in {run_id, *others, *(a["run_id"] for a in awaited)}:
                await sup.wait(run)
            if await sup.wait(run_id) is RunStatus.SLEEPING and await _world(store) == world:
                return status, awaited, others
        await anyio.sleep(0.05)


async def _world(store: Store) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """What the store's unfinished runs wait on the world for (see ``_rest``)."""
    awaited: list[dict[str, Any]] = []
    others: dict[str, list[str]] = {}
    for run_id in sorted(await store.run_stats()):
        state = fold(await store.read(run_id))
        if state.finished is not None:
            continue
        for call in state.calls.values():
            wait = call.wait
            if call.done or wait is None or wait.event is None:
                continue
            if state.signal_for(wait.event) is None:
                awaited.append(
                    {
                        "run_id": run_id,
                        "call_id": call.id,
                        "name": call.name,
                        "input": call.input,
                        "event": wait.event,
                        "until": wait.until,
                    }
                )
        outcome = run_status(state, time.time())
        if outcome.status in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.NEEDS_ATTENTION):
            others[run_id] = list(outcome.pending)
    return awaited, others
