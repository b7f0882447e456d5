"""A cancellation stops a run that a worker is advancing, whatever the run is doing.

An answer queued for a held run used to wait for the run's next pause, so a run that never
rests ran on for good after ``tether cancel`` said "queued". Now the holder notices a queued
cancellation before its next model or tool call (a directory store looks at the inbox before
each one, unless its inotify watch says the inbox is unchanged), and within about a second
while a call is in flight (it looks twice a second, and at once when the directory store's
watch or a PostgreSQL ``NOTIFY`` says an inbox changed): the call in flight is cancelled and
recorded as interrupted, no new call starts, the run ends ``cancelled``, and so do its
children.

The in-process tests here cancel through a second store object (its own descriptors, as
another process has: the holder's lock refuses it, so the answer is queued); the
``tether worker`` tests at the end use real processes on files and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Iterator
from typing import Any

import anyio
import pytest

import tether
from tether import RunStateError, operate
from tether._errors import RecordTooLargeError
from tether.journal import (
    AnyEvent,
    Event,
    FileJournal,
    FileStore,
    RunFinished,
    Suspended,
    ToolFailed,
    ToolResult,
    ToolStarted,
)
from tether.models import Message, SystemPrompt, ToolDefinition
from tether.supervisor import RunStatus, Supervisor, fold
from tether.supervisor._halts import Halts
from tether.testing import FaultyFileOps

from .._cli import run_tether
from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ._helpers import WAIT, RecordingModel, of_type, read_events

use = tether.ScriptedModel.tool_use
RUN = "run-runaway"
REPO = pathlib.Path(__file__).resolve().parents[2]


def never_rests(messages: list[Message]) -> Any:
    step = sum(1 for m in messages if m["role"] == "assistant")
    return [use(f"toolu_{step}", "send", {"n": step})]


class World:
    """What the run did to the outside world, and a way to hold a call in flight."""

    def __init__(self, *, hold: bool) -> None:
        self.sent: list[int] = []
        self.hold = hold
        self.in_flight = anyio.Event()

    def tools(self) -> tether.ToolRegistry:
        tools = tether.ToolRegistry()

        @tools.tool  # escalate: the outcome of a call cut short is unknown
        async def send(n: int) -> str:
            """Send message ``n``."""
            self.sent.append(n)
            if self.hold:
                self.in_flight.set()
                await anyio.sleep_forever()
            await anyio.sleep(0)
            return f"sent {n}"

        return tools


async def _until(check: Any, what: str) -> None:
    with anyio.fail_after(WAIT):
        while not check():
            await anyio.sleep(0.005)


@pytest.fixture(params=["watched", "unwatched"])
def watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """With the store's watch of its directory (Linux inotify: a call looks at the inbox only
    when it changed), and without (every call looks)."""
    if request.param == "unwatched":
        monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    elif sys.platform != "linux":
        pytest.skip("inotify is Linux's")
    return str(request.param)


@pytest.mark.parametrize("deaf", [False, True], ids=["", "deaf watch"])
async def test_a_queued_cancel_stops_a_call_in_flight(
    tmp_path: pathlib.Path, watch: str, deaf: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the watch, it alone wakes the holder (the poll is made hourly). With a watch that
    hears of no inbox (a post made through another kernel: a network filesystem written from
    another machine raises no inotify event), the look at every inbox at the poll's interval
    still finds it."""
    if deaf:  # (without a watch: the poll alone, made fast)
        monkeypatch.setattr("tether.journal._watch.RunsWatch._inbox_news", lambda s, r: None)
        monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 0.05)
    elif watch == "watched":
        monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)
    world = World(hold=True)
    model = tether.ScriptedModel(never_rests)
    async with Supervisor(FileStore(tmp_path), model=model, tools=world.tools()) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            await world.in_flight.wait()
        async with FileStore(tmp_path) as other:  # as another process would
            done = await operate.cancel(other, RUN, reason="runaway", by="priya")
        assert done.queued
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
        view = await sup.inspect(RUN)
    assert view.reason == "runaway (by priya)"
    assert world.sent == [0]
    events = await read_events(tmp_path, RUN)
    (failed,) = of_type(events, ToolFailed)
    assert failed.call_id == "toolu_0"
    assert failed.timed_out
    assert "interrupted: the run was cancelled while this call ran" in failed.error
    assert of_type(events, ToolResult) == []
    assert isinstance(events[-1], RunFinished)
    assert events[-1].status == "cancelled"
    assert not (tmp_path / "runs" / f"{RUN}.inbox").exists()


async def test_a_queued_cancel_starts_no_new_call(tmp_path: pathlib.Path, watch: str) -> None:
    world = World(hold=False)
    model = tether.ScriptedModel(never_rests)
    async with Supervisor(FileStore(tmp_path), model=model, tools=world.tools()) as sup:
        await sup.start(RUN, "go")
        await _until(lambda: len(world.sent) >= 20, "twenty sends")
        async with FileStore(tmp_path) as other:
            done = await operate.cancel(other, RUN, reason="runaway")
            at_ack = len(world.sent)
        assert done.queued
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    assert len(world.sent) - at_ack <= 1  # at most the call in flight when it was queued
    events = await read_events(tmp_path, RUN)
    _each_call_ended(events, sent=len(world.sent))
    assert fold(events).finished == RunFinished(
        seq=events[-1].seq, at=events[-1].at, status="cancelled", reason="runaway"
    )


def _each_call_ended(events: list[Any], *, sent: int) -> None:
    """Every call the journal says started has an end on record: the ``sent`` that ran one
    each, and at most one more, stopped by the cancellation after its ``tool_started`` was
    written but before the tool did anything, recorded as interrupted (from the journal
    alone its outcome is unknown)."""
    started = [e.call_id for e in of_type(events, ToolStarted)]
    ended = {e.call_id: e for e in events if isinstance(e, (ToolResult, ToolFailed))}
    assert sorted(ended) == sorted(started)
    assert sent <= len(started) <= sent + 1
    for call_id in started[sent:]:
        end = ended[call_id]
        assert isinstance(end, ToolFailed)
        assert end.error.startswith("interrupted: the run was cancelled while this call ran")


class HeldFinish(FaultyFileOps):
    """The sync of the group that records the run's cancellation waits until ``release``;
    ``held`` is set once it waits."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()
        self.release = threading.Event()
        self.finish_written = False

    def write_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self.finish_written = b"runaway" in bytes(data)  # the cancellation's reason
        super().write_all(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        if self.finish_written and not self.held.is_set():
            self.held.set()
            self.release.wait(WAIT)
        super().fdatasync(fd)


async def test_a_cancellation_landing_as_the_drive_is_halted_ends_the_journal(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drive takes a queued cancellation in before a call (with no watch it looks before
    each one), and while that record's group waits for its sync the drive is halted (here by
    this supervisor's own ``cancel``; the halter, woken by the watch at the same post, did it
    in a race): the drive's wait is cut short, the group lands after all, and nothing may be
    recorded after it (a ``suspended`` after ``run_finished`` was, judged on the journal
    before the group had landed). The ``cancel`` is refused, the run being cancelled
    already, and the run is shown as its journal ends at once, not at the next sweep."""
    monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)  # (its look: not here)
    world = World(hold=False)
    syncs = HeldFinish()
    store = FileStore(tmp_path, file_ops=syncs, io_uring=False)
    model = tether.ScriptedModel(never_rests)
    async with Supervisor(store, model=model, tools=world.tools(), sweep_interval=None) as sup:
        await sup.start(RUN, "go")
        await _until(lambda: len(world.sent) >= 3, "three sends")
        async with FileStore(tmp_path) as other:
            assert (await operate.cancel(other, RUN, reason="runaway")).queued
        await anyio.to_thread.run_sync(syncs.held.wait, WAIT)

        async def release_once_halted() -> None:
            await _until(lambda: RUN in halting, "the drive's halt")  # its wait is cut now
            syncs.release.set()

        halting = sup._rt.halting
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_once_halted)
            with pytest.raises(RunStateError, match="finished"):
                await sup.cancel(RUN, reason="again")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    events = await read_events(tmp_path, RUN)
    assert of_type(events, Suspended) == []
    _each_call_ended(events, sent=len(world.sent))
    assert isinstance(events[-1], RunFinished)
    assert (events[-1].status, events[-1].reason) == ("cancelled", "runaway")


def harmless_sends(sent: list[int]) -> tether.ToolRegistry:
    """A ``send`` that may run again harmlessly (so it starts in its answer's own group)."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def send(n: int) -> str:
        """Send message ``n`` (again, harmlessly, if it was cut short)."""
        sent.append(n)
        return f"sent {n}"

    return tools


class CancelsAtItsFourthAnswer(RecordingModel):
    """``never_rests`` under a model that queues the run's cancellation (through a store of
    its own, as another process would) as it gives its fourth answer."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(tether.ScriptedModel(never_rests))
        self.root = root

    async def __call__(
        self, *, system: SystemPrompt, messages: list[Message], tools: list[ToolDefinition]
    ) -> tether.ModelReply:
        if len(self.requests) == 3:  # (the fourth call)
            async with FileStore(self.root) as other:
                assert (await operate.cancel(other, RUN, reason="runaway")).queued
        return await super().__call__(system=system, messages=messages, tools=tools)


async def test_a_run_cancelled_by_its_halter_and_by_a_cancel_at_once_is_reported_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The halter stops a call in flight for a queued cancellation, and while that record
    waits for its sync this supervisor's own ``cancel`` halts the run too (and is refused:
    the run is cancelled by then). Both settle the run on the board; watchers hear of its
    cancellation once."""
    monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 0.02)
    halts: list[str] = []
    halt = Halts.halt

    async def counted(self: Halts, run_id: str) -> bool:
        halts.append(run_id)
        return await halt(self, run_id)

    monkeypatch.setattr(Halts, "halt", counted)
    world = World(hold=True)
    syncs = HeldFinish()
    store = FileStore(tmp_path, file_ops=syncs, io_uring=False)
    model = tether.ScriptedModel(never_rests)
    changes: list[RunStatus] = []
    async with Supervisor(store, model=model, tools=world.tools(), sweep_interval=None) as sup:

        async def watch() -> None:
            async for change in sup.events():
                changes.append(change.status)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await sup.start(RUN, "go")
            with anyio.fail_after(WAIT):
                await world.in_flight.wait()
            async with FileStore(tmp_path) as other:
                assert (await operate.cancel(other, RUN, reason="runaway")).queued
            await anyio.to_thread.run_sync(syncs.held.wait, WAIT)  # the halter's record

            async def release_once_both_halt() -> None:
                await _until(lambda: len(halts) == 2, "the second halt")
                syncs.release.set()

            tg.start_soon(release_once_both_halt)
            with pytest.raises(RunStateError, match="finished"):
                await sup.cancel(RUN, reason="again")
            assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
            await anyio.sleep(0.05)  # (for a second report, had there been one)
            tg.cancel_scope.cancel()
    assert changes.count(RunStatus.CANCELLED) == 1, changes
    events = await read_events(tmp_path, RUN)
    assert isinstance(events[-1], RunFinished)
    assert (events[-1].status, events[-1].reason) == ("cancelled", "runaway")


async def test_a_call_started_with_the_answer_and_stopped_before_it_ran_says_so(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose tool may run again harmlessly is started in the model answer's own group;
    the drive takes in a cancellation queued meanwhile before running it: the call's end is
    recorded as "not run", before the cancellation, so a finished run leaves no call in
    flight (its ``tool_started`` and nothing after it, which every view would show as a call
    whose outcome is unknown)."""
    monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)  # the drive's look alone
    sent: list[int] = []
    tools = harmless_sends(sent)
    model = CancelsAtItsFourthAnswer(tmp_path)
    async with Supervisor(FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    assert sent == [0, 1, 2]
    events = await read_events(tmp_path, RUN)
    kinds = [type(e).__name__ for e in events[-4:]]
    assert kinds == ["ModelResponse", "ToolStarted", "ToolResult", "RunFinished"], kinds
    started, result, finished = events[-3:]
    assert isinstance(started, ToolStarted)
    assert isinstance(result, ToolResult)
    assert (started.call_id, result.call_id, result.ok) == ("toolu_3", "toolu_3", False)
    assert result.content == "not run: the run was cancelled before this call started"
    assert isinstance(finished, RunFinished)
    assert finished.status == "cancelled"
    assert not any(c.dangling for c in fold(events).calls.values())


class CountedLooks:
    """A directory store that counts the looks at inboxes (``inbox_versions``) by run, and
    can queue a cancellation of each run it creates just after creating it."""

    def __init__(self, root: pathlib.Path, *, cancel_after_create: bool = False) -> None:
        self._inner = FileStore(root)
        self.looks: Counter[str] = Counter()  # before a call (``Halts.queued``)
        self.rest_looks: Counter[str] = Counter()  # when the run rests (``fold_inbox``)
        self.cancel_after_create = cancel_after_create

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> CountedLooks:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._inner.__aexit__(*exc_info)

    async def inbox_versions(self, run_ids: Collection[str]) -> dict[str, Hashable]:
        self.looks.update(run_ids)
        return await self._inner.inbox_versions(run_ids)

    async def has_inbox(self, run_id: str) -> bool:
        self.rest_looks[run_id] += 1
        return await self._inner.has_inbox(run_id)

    async def create(self, run_id: str, events: Iterable[Event] = ()) -> FileJournal:
        journal = await self._inner.create(run_id, events)
        if self.cancel_after_create:  # as another process would, before the run's first call
            since = self._inner.inbox_news()
            async with FileStore(self._inner.root) as other:
                assert (await operate.cancel(other, run_id, reason="too soon")).queued
            with anyio.fail_after(WAIT):
                await self._inner.inbox_changed(since)
        return journal


async def test_a_run_created_here_needs_no_look_at_its_inbox_while_nothing_is_posted(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing can be queued for a run before it exists: the supervisor that creates it takes
    its inbox's mark first, and while the mark stays put its drive looks (an ``lstat``)
    neither before its first call nor when the run rests."""
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)  # the drives' looks alone
    store = CountedLooks(tmp_path)
    model = tether.ScriptedModel(lambda messages: "done")
    async with Supervisor(store, model=model, tools=tether.ToolRegistry()) as sup:
        assert store.inbox_mark("run-0") is not None  # (inotify: Linux)
        for n in range(3):
            await sup.start(f"run-{n}", "go")
            assert await sup.wait(f"run-{n}", timeout=WAIT) is RunStatus.DONE
    assert store.looks == Counter()
    assert store.rest_looks == Counter()
    assert model.calls == 3


async def test_a_cancellation_queued_just_after_the_run_was_created_stops_its_first_call(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark is taken before the run is created, so a post made after (here between the
    creation and the supervisor's next step, its watch told of it) moves it: the drive looks
    before its first call, and the run ends cancelled without calling the model."""
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)
    store = CountedLooks(tmp_path, cancel_after_create=True)
    model = tether.ScriptedModel(lambda messages: "done")
    async with Supervisor(store, model=model, tools=tether.ToolRegistry()) as sup:
        await sup.start(RUN, "go")
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    assert model.calls == 0
    assert store.looks[RUN] >= 1
    events = await read_events(tmp_path, RUN)
    assert [type(e).__name__ for e in events] == ["RunStarted", "RunFinished"]


async def test_a_cancellation_that_cannot_be_journaled_leaves_the_started_calls_to_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued cancellation the journal refuses (too large: queued by an older tether,
    which did not check) is dropped, and nothing of it is recorded: the calls started with
    the model's answer are then run once each, as if it had never come."""
    monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)
    append = FileJournal.append

    async def refusing(
        self: FileJournal, events: Iterable[Event], *, at: float | None = None
    ) -> list[AnyEvent]:
        group = list(events)
        if any(isinstance(e, RunFinished) and e.reason == "runaway" for e in group):
            raise RecordTooLargeError(self.path, 1 << 30, 1 << 20)
        return await append(self, group, at=at)

    monkeypatch.setattr(FileJournal, "append", refusing)
    sent: list[int] = []
    tools = harmless_sends(sent)
    model = CancelsAtItsFourthAnswer(tmp_path)
    async with Supervisor(FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start(RUN, "go", budgets=tether.Budgets(max_model_calls=6))
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.FAILED  # its budget, at last
    assert sent == [0, 1, 2, 3, 4, 5]
    events = await read_events(tmp_path, RUN)
    started = [(e.call_id, e.attempt) for e in of_type(events, ToolStarted)]
    assert started == [(f"toolu_{n}", 1) for n in range(6)]
    assert all(r.ok for r in of_type(events, ToolResult))


async def test_supervisor_cancel_stops_its_own_run_at_once(tmp_path: pathlib.Path) -> None:
    world = World(hold=True)
    model = tether.ScriptedModel(never_rests)
    async with Supervisor(FileStore(tmp_path), model=model, tools=world.tools()) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            await world.in_flight.wait()
        with anyio.fail_after(WAIT):
            await sup.cancel(RUN, reason="stop", by="sam")
        assert (await sup.inspect(RUN)).status is RunStatus.CANCELLED
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    events = await read_events(tmp_path, RUN)
    assert [type(e).__name__ for e in events[-3:]] == ["ToolFailed", "Suspended", "RunFinished"]
    assert fold(events).finished is not None


# ------------------------------------------------------------------ real worker processes


def _worker(argv: list[str], env: dict[str, str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", *argv],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def _sends(ledger: pathlib.Path) -> list[tuple[float, str]]:
    if not ledger.exists():
        return []
    out = []
    for line in ledger.read_text().splitlines():
        at, key = line.split(" ", 1)
        out.append((float(at), key))
    return out


@pytest.fixture(params=["file", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[list[str]]:
    if request.param == "file":
        yield ["--root", str(tmp_path / "store")]
    else:
        dsn = request.getfixturevalue("pg_dsn")
        yield ["--store", dsn, "--schema", request.getfixturevalue("pg_schema")]


def _wait_for(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _status(where: list[str], run_id: str) -> str:
    shown = run_tether("runs", *where, "--json")
    (run,) = [r for r in json.loads(shown.stdout) if r["run_id"] == run_id]
    return str(run["status"])


def _start_run(where: list[str], run_id: str, prompt: str) -> None:
    """Create the run for the workers (as a web handler would: ``drive=False``)."""
    from tether._store_url import store_for

    from . import _runaway_app

    async def create() -> None:
        if where[0] == "--root":
            store = store_for(where[1])
        else:
            store = store_for(where[1], schema=where[3])
        async with Supervisor(
            store, model=_runaway_app.make_model(), tools=_runaway_app.tools, resume=False
        ) as sup:
            await sup.start(run_id, prompt, drive=False)

    anyio.run(create)


@pytest.mark.slow
@pytest.mark.parametrize("lead", [False, True], ids=["run", "run-and-child"])
def test_tether_cancel_stops_a_run_a_worker_drives_within_3_s(
    where: list[str], tmp_path: pathlib.Path, lead: bool
) -> None:
    ledger = tmp_path / "ledger"
    log = tmp_path / "worker.log"
    run_id = "run-lead" if lead else RUN
    _start_run(where, run_id, "lead: help the customer" if lead else "help the customer")
    worker = _worker(
        [*where, "--app", "tests.supervisor._runaway_app:app"],
        {"TETHER_TEST_LEDGER": str(ledger), "TETHER_TEST_STEP": "0.1"},
        log,
    )
    try:
        _wait_for(lambda: len(_sends(ledger)) >= 5, 60, f"no sends: {log.read_text()}")
        cancelled = run_tether(
            "cancel", *where, run_id, "--reason", "runaway agent", "--by", "priya"
        )
        acked = time.time()
        assert cancelled.returncode == 0, cancelled.stderr
        if lead:  # the lead rests, waiting for its helper: recorded at once, the helper queued
            assert cancelled.stdout.startswith(f"recorded: run {run_id} cancelled")
        else:
            assert cancelled.stdout.startswith("queued: another process is advancing the run")
            assert "stop the run within about a second" in cancelled.stdout
        _wait_for(lambda: _status(where, run_id) == "cancelled", 3, "not cancelled within 3 s")
        stopped = time.time()
        assert stopped - acked < 3
        time.sleep(0.5)  # nothing more happens after it
        after = [key for at, key in _sends(ledger) if at > acked]
        assert len(after) <= 1, after
        if lead:
            child = f"{run_id}.toolu_h"
            assert _status(where, child) == "cancelled"
            shown = run_tether("show", *where, child)
            assert "its parent: runaway agent (by priya)" in shown.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    assert "ignored a queued answer" not in log.read_text()


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "unwatched"])
async def test_a_look_for_a_cancellation_cut_short_is_taken_again(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    """A look at the inbox that fails (the inbox unreadable for a moment) remembers nothing:
    the next call looks again, and finds the cancellation."""
    if not watched:
        monkeypatch.setattr("tether.journal._store.open_watch", lambda directory: None)
    elif sys.platform != "linux":
        pytest.skip("inotify is Linux's")
    from tether.journal import Manifest, RunStarted
    from tether.supervisor._halts import Halts

    async with FileStore(tmp_path) as store:
        journal = await store.create(
            RUN, [RunStarted(run_id=RUN, manifest=Manifest(model="m"), messages=[])]
        )
        async with FileStore(tmp_path) as other:
            await other.post(RUN, RunFinished(status="cancelled", reason="runaway"))
        await anyio.to_thread.run_sync(lambda: None)  # the loop reads the watch's events
        halts = Halts(store, rt=None, board=None)  # type: ignore[arg-type]  # queued needs neither
        real_peek = store.peek_inbox

        async def unreadable(run_id: str) -> list[Any]:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(store, "peek_inbox", unreadable)
        with pytest.raises(OSError, match="Input/output"):
            await halts.queued(RUN)
        monkeypatch.setattr(store, "peek_inbox", real_peek)
        assert await halts.queued(RUN)
        await journal.aclose()


async def test_a_failed_look_at_a_run_with_a_call_in_flight_is_taken_again(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, watch: str
) -> None:
    """The holder's first look at the cancellation fails (the inbox unreadable for a moment):
    it keeps nothing of it, and a later look halts the call in flight."""
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 0.05)
    world = World(hold=True)
    store = FileStore(tmp_path)
    model = tether.ScriptedModel(never_rests)
    async with Supervisor(store, model=model, tools=world.tools()) as sup:
        await sup.start(RUN, "go")
        with anyio.fail_after(WAIT):
            await world.in_flight.wait()
        real_peek = store.peek_inbox
        failed: list[str] = []

        async def unreadable_once(run_id: str) -> list[Any]:
            if not failed:
                failed.append(run_id)
                raise OSError(5, "Input/output error")
            return await real_peek(run_id)

        monkeypatch.setattr(store, "peek_inbox", unreadable_once)
        async with FileStore(tmp_path) as other:
            assert (await operate.cancel(other, RUN, reason="runaway")).queued
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.CANCELLED
    assert failed == [RUN]
    assert world.sent == [0]
