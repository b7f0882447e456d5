"""The operator's verbs have one implementation, used by ``Supervisor``, ``tether.operate``,
the CLI and the console, and what it acknowledges holds."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable

import anyio
import pytest

from tether import Budgets, RunStateError, operate
from tether.journal import Decision, FileStore, Manifest, RunStarted, Signal, Store
from tether.supervisor import Supervisor

from .._cli import REPO
from ..cli._stores import APPROVE, CHARGE_CALL, ESCALATED, REFUND_CALL, Env, cli_async

MORE = Budgets(max_model_calls=3)


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Env:
    built = Env(tmp_path / "store")
    anyio.run(built.build)
    return built


async def test_a_queued_answer_is_checked_against_the_answers_queued_before_it(
    env: Env,
) -> None:
    """Two people answer a held run's call: the second is refused now, with the first
    person's name, instead of being acknowledged and then ignored by the holder."""
    async with (
        FileStore(env.root) as store,
        await store.open(APPROVE),  # a worker holds the run
        FileStore(env.root) as other,
    ):
        first = await operate.decide(other, APPROVE, REFUND_CALL, approved=True, by="priya")
        assert first.queued
        with pytest.raises(RunStateError, match="already approved by priya"):
            await operate.decide(other, APPROVE, REFUND_CALL, approved=False, by="sam")
        assert [type(e) for e in await other.peek_inbox(APPROVE)] == [Decision]
    view = await env.resume(APPROVE)
    assert view.status.value == "done"
    decisions = [e for e in await env.events(APPROVE) if isinstance(e, Decision)]
    assert [(d.by, d.approved) for d in decisions] == [("priya", True)]


async def test_answers_queued_for_a_holder_that_stopped_before_its_pause_are_not_passed_over(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """priya's approval is queued while a worker holds the run; the worker stops before its
    next pause (its lock let go, as a killed process's is). sam's rejection of the same call
    is refused as it was while the worker lived (it was recorded, and priya's approval then
    dropped by the next worker), and a signal given now is queued behind the approval, so
    the next process records both, in the order they were given."""
    async with FileStore(env.root) as store:
        async with await store.open(APPROVE):  # a worker holds the run
            first = await operate.decide(store, APPROVE, REFUND_CALL, approved=True, by="priya")
            assert first.queued
        # The worker is gone; nothing recorded priya's approval yet.
        with pytest.raises(RunStateError, match="already approved by priya"):
            await operate.decide(store, APPROVE, REFUND_CALL, approved=False, by="sam")
    argv = ("signal", "--root", env.r, APPROVE, "payment.o-1", "--id", "evt_1")
    code, out, _ = await cli_async(capsys, *argv)
    assert code == 0
    assert out.startswith("queued behind the answers waiting in the run's inbox")
    assert "signal payment.o-1 (evt_1)" in out
    assert [e for e in await env.events(APPROVE) if isinstance(e, Decision | Signal)] == []
    await env.resume(APPROVE)
    answers = [e for e in await env.events(APPROVE) if isinstance(e, Decision | Signal)]
    assert [type(a).__name__ for a in answers] == ["Decision", "Signal"]
    assert isinstance(answers[0], Decision)
    assert (answers[0].by, answers[0].approved) == ("priya", True)


async def test_a_signal_delivered_again_after_the_run_finished_is_acknowledged(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("signal", "--root", env.r, APPROVE, "payment.o-1", "--id", "evt_1")
    code, out, _ = await cli_async(capsys, *argv)
    assert code == 0
    assert out.startswith("recorded: signal payment.o-1 (evt_1)")
    code, _, _ = await cli_async(capsys, "cancel", "--root", env.r, APPROVE)
    assert code == 0
    # A webhook retries its delivery: the run has it already, so this is no error.
    code, out, err = await cli_async(capsys, *argv)
    assert (code, err) == (0, "")
    assert out.startswith("already recorded: signal payment.o-1 (evt_1)")
    # A new signal to a finished run is still refused.
    code, _, err = await cli_async(capsys, "signal", "--root", env.r, APPROVE, "payment.o-1")
    assert code == 1
    assert "run already finished (cancelled)" in err
    signals = [e for e in await env.events(APPROVE) if isinstance(e, Signal)]
    assert [s.signal_id for s in signals] == ["evt_1"]


async def test_a_signal_delivered_again_while_the_first_waits_in_the_inbox_says_queued(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker holds the run: the first delivery is queued, not recorded, and so is what a
    second delivery is told of (it was "already recorded" once, though the holder could still
    refuse it, and did, for a run that finished before its next pause)."""
    argv = ("signal", "--root", env.r, APPROVE, "payment.o-1", "--id", "evt_1")
    async with FileStore(env.root) as store, await store.open(APPROVE):  # a worker holds it
        code, out, _ = await cli_async(capsys, *argv)
        assert code == 0
        assert out.startswith("queued: ")
        code, out, err = await cli_async(capsys, *argv)
        assert (code, err) == (0, "")
        assert out.startswith("already queued: signal payment.o-1 (evt_1)")
        assert "record it at the run's next pause" in out
        assert "recorded:" not in out
        assert [type(e) for e in await store.peek_inbox(APPROVE)] == [Signal]
    assert [e for e in await env.events(APPROVE) if isinstance(e, Signal)] == []


async def test_supervisor_and_operate_refuse_and_accept_the_same_answers(env: Env) -> None:
    async with (
        FileStore(env.root) as store,
        Supervisor(store, model=env.model(), tools=env.tools(), resume=False) as sup,
    ):
        for resolve in (sup.resolve, lambda *a, **k: operate.resolve(store, *a, **k)):
            with pytest.raises(ValueError, match="does not apply to the outcome retry"):
                await resolve(ESCALATED, CHARGE_CALL, outcome="retry", result=1, by="priya")
        for retry in (sup.retry, lambda *a, **k: operate.retry(store, *a, **k)):
            with pytest.raises(ValueError, match="not both"):
                await retry(
                    ESCALATED,
                    by="x",
                    extend=[("max_model_calls", 1)],
                    budgets=Budgets(max_model_calls=3),
                )
            with pytest.raises(RunStateError, match="answer them with resolve"):
                await retry(ESCALATED, by="x", extend=[("max_model_calls", 1)])
        with pytest.raises(ValueError, match="a signal id is"):
            await sup.signal(APPROVE, "payment.o-1", signal_id="has spaces")
        with pytest.raises(ValueError, match="a signal id is"):
            await operate.signal(store, APPROVE, "payment.o-1", signal_id="x" * 201)


async def test_two_answers_to_one_call_at_once_one_is_recorded_the_other_refused(
    env: Env,
) -> None:
    """Two requests to one console approve and reject the same call at the same moment, no
    worker holding the run: one is recorded, the other is refused naming it. (The second
    found the journal held by the first, and was queued against the journal as it stood
    before the first landed: acknowledged, then dropped by the next worker.)"""
    outcomes: list[object] = []

    async def answer(store: FileStore, approved: bool, by: str) -> None:
        try:
            outcomes.append(
                await operate.decide(store, APPROVE, REFUND_CALL, approved=approved, by=by)
            )
        except RunStateError as exc:
            outcomes.append(exc)

    async with FileStore(env.root) as store:
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer, store, True, "priya")
            tg.start_soon(answer, store, False, "sam")
        assert await store.peek_inbox(APPROVE) == []
    recorded = [o for o in outcomes if not isinstance(o, RunStateError)]
    refused = [o for o in outcomes if isinstance(o, RunStateError)]
    assert len(recorded) == 1
    assert len(refused) == 1
    assert not recorded[0].queued  # type: ignore[attr-defined]
    assert "was already" in str(refused[0])


async def test_an_answer_waits_out_another_answer_s_moment_with_the_journal(
    env: Env,
) -> None:
    """Another process holds the journal for a moment (its own answer's append): an answer
    given then is recorded once it is let go, not queued for a worker that is not there."""
    async with FileStore(env.root) as store, FileStore(env.root) as other:
        journal = await store.open(APPROVE)

        async def let_go() -> None:
            await anyio.sleep(0.1)
            await journal.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(let_go)
            done = await operate.decide(other, APPROVE, REFUND_CALL, approved=True, by="priya")
        assert not done.queued
        assert done.record.seq > 0
        assert await other.peek_inbox(APPROVE) == []


async def test_a_signal_queued_for_a_run_that_then_finishes_is_kept(
    tmp_path: pathlib.Path,
) -> None:
    """Acknowledged as queued while a worker ran the run's last call; the run finished before
    its next pause: the signal is recorded all the same (as it would have been had nobody
    held the run), and a delivery again is told it counts once, not refused."""
    import tether

    inside, release = anyio.Event(), anyio.Event()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def slow() -> str:
        """Work a while."""
        inside.set()
        await release.wait()
        return "worked"

    use = tether.ScriptedModel.tool_use
    model = tether.ScriptedModel([[use("toolu_1", "slow", {})], "done"])
    async with Supervisor(FileStore(tmp_path), model=model, tools=tools) as sup:
        await sup.start("r", "work")
        with anyio.fail_after(10):
            await inside.wait()
        async with FileStore(tmp_path) as other:
            done = await operate.signal(other, "r", "paid", {"n": 1}, signal_id="s1")
        assert done.queued
        release.set()
        assert (await sup.wait("r", timeout=10)).value == "done"
    events = await FileStore(tmp_path).read("r")
    (kept,) = [e for e in events if isinstance(e, Signal)]
    assert (kept.name, kept.signal_id) == ("paid", "s1")
    async with FileStore(tmp_path) as other:
        again = await operate.signal(other, "r", "paid", {"n": 1}, signal_id="s1")
    assert again.repeated
    assert not (tmp_path / "runs" / "r.inbox").exists()


def test_answers_from_threads_with_their_own_event_loops_do_not_wait_on_each_other(
    env: Env,
) -> None:
    """A threaded web server calls ``tether.operate`` with ``anyio.run`` in each thread: the
    answers of one thread to a run never wait on a lock of another thread's loop (which it
    could never be woken from)."""
    done: list[int] = []

    async def answer_often() -> None:
        async with FileStore(env.root) as store:
            for _ in range(30):
                with pytest.raises(RunStateError):
                    await operate.retry(store, APPROVE, by="priya")  # refused, under the lock
        done.append(1)

    threads = [threading.Thread(target=anyio.run, args=(answer_often,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    assert done == [1, 1]


RACES = 12


def test_an_approval_and_a_rejection_raced_by_two_processes_while_a_worker_holds_the_run(
    tmp_path: pathlib.Path,
) -> None:
    """``tether approve`` and ``tether reject`` of one call, started at the same moment as
    processes of their own, while another process holds the run (a worker advancing it), for
    several runs at once: for each run one is queued and the other refused naming it, and
    the one queued is the one the next worker records. (Each checked its answer against an
    inbox without the other's, so both were told "queued", and the worker then dropped one.)"""
    env = Env(tmp_path / "store")
    race_approvals(env, env.store, ["--root", env.r])


def race_approvals(env: Env, make_store: Callable[[], Store], where: list[str]) -> None:
    """Park ``RACES`` runs for the approval of one call in the store ``make_store`` opens,
    hold them, race ``tether approve`` against ``tether reject`` (``where``: the store's
    options) on each, then check what each was told against what the next worker records."""
    runs = [f"race-{i}" for i in range(RACES)]

    async def park() -> None:
        async with Supervisor(make_store(), model=env.model(), tools=env.tools()) as sup:
            for run_id in runs:
                await sup.start(run_id, "refund o-1")
            for run_id in runs:
                assert (await sup.wait(run_id, timeout=30)).value == "waiting_for_approval"

    def answer(verb: str, run_id: str, by: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", verb, *where, run_id, REFUND_CALL, "--by", by],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    said: dict[str, dict[str, tuple[int, str]]] = {}

    async def race() -> None:
        async with make_store() as store:
            held = [await store.open(run_id) for run_id in runs]  # a worker advances them
            started = {
                run_id: {
                    "priya": answer("approve", run_id, "priya"),
                    "sam": answer("reject", run_id, "sam"),
                }
                for run_id in runs
            }
            for run_id, procs in started.items():
                said[run_id] = {}
                for by, proc in procs.items():
                    out, _ = await anyio.to_thread.run_sync(proc.communicate, None, 60)
                    said[run_id][by] = (proc.returncode, out)
            for journal in held:
                await journal.aclose()

    async def resume() -> dict[str, list[str]]:
        async with Supervisor(make_store(), model=env.model(), tools=env.tools()) as sup:
            for run_id in runs:
                assert (await sup.wait(run_id, timeout=30)).value == "done"
        async with make_store() as store:
            return {
                run_id: [e.by for e in await store.read(run_id) if isinstance(e, Decision)]
                for run_id in runs
            }

    anyio.run(park)
    anyio.run(race)
    recorded = anyio.run(resume)
    for run_id in runs:
        queued = [by for by, (code, _) in said[run_id].items() if code == 0]
        refused = [out for code, out in said[run_id].values() if code != 0]
        assert len(queued) == 1, (run_id, said[run_id])
        assert "queued" in said[run_id][queued[0]][1]
        assert len(refused) == 1
        assert "was already" in refused[0]
        assert recorded[run_id] == queued, run_id


def test_an_approval_appended_slowly_and_a_rejection_queued_meanwhile_are_judged_together(
    tmp_path: pathlib.Path,
) -> None:
    """``tether approve`` opens the parked run and checks the approval, and its write is slow
    (a loaded machine); ``tether reject`` of the same call, from a process of its own, finds
    the journal held, and goes to the run's inbox meanwhile. It is judged with the approval,
    refused naming it, and never told "queued" (checked against the journal without the
    approval, it was, and the next worker then dropped it)."""
    env = Env(tmp_path / "store")
    race_a_slow_answer(env, env.store, ["--root", env.r], tmp_path / "marks")


def race_a_slow_answer(
    env: Env, make_store: Callable[[], Store], where: list[str], marks: pathlib.Path
) -> None:
    """Park a run for the approval of one call in the store ``make_store`` opens; approve it
    with a slow append (``_slow_answer``) and, inside that window, reject it from another
    process (``where``: the store's options); check what each was told against what the
    next worker records."""
    run_id = "slow-race"
    marks.mkdir()
    approving, rejecting = marks / "approve", marks / "reject"

    async def park() -> None:
        async with Supervisor(make_store(), model=env.model(), tools=env.tools()) as sup:
            await sup.start(run_id, "refund o-1")
            assert (await sup.wait(run_id, timeout=30)).value == "waiting_for_approval"

    def answer(mode: str, mark: pathlib.Path, verb: str, by: str) -> subprocess.Popen[str]:
        argv = [verb, *where, run_id, REFUND_CALL, "--by", by]
        return subprocess.Popen(
            [sys.executable, "-m", "tests.operate._slow_answer", mode, str(mark), *argv],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    async def reached(mark: pathlib.Path, proc: subprocess.Popen[str]) -> None:
        with anyio.fail_after(60):
            while not mark.exists():
                assert proc.poll() is None, proc.communicate()[0]
                await anyio.sleep(0.01)

    async def ended(proc: subprocess.Popen[str]) -> tuple[int, str]:
        try:
            out, _ = await anyio.to_thread.run_sync(proc.communicate, None, 60)
        except subprocess.TimeoutExpired:
            proc.kill()  # nothing left behind by a failing race
            out, _ = proc.communicate()
            raise AssertionError(f"{proc.args!r} did not end: {out}") from None
        return proc.returncode, out

    async def race() -> dict[str, tuple[int, str]]:
        said: dict[str, tuple[int, str]] = {}
        slow = answer("slow-append", approving, "approve", "priya")
        try:
            await reached(approving, slow)  # checked, the journal held: its write waits
            other = answer("mark-queue", rejecting, "reject", "sam")
            try:
                await reached(rejecting, other)  # it found the journal held: to the inbox
                # It is refused the inbox's lock, which the slow answer holds while it
                # appends, or (without that lock) it queues and ends: let the slow one go then.
                waiting = rejecting.with_suffix(".waiting")
                with anyio.fail_after(60):
                    while other.poll() is None and not waiting.exists():
                        await anyio.sleep(0.01)
            finally:
                approving.with_suffix(".go").write_text("go")
                said["sam"] = await ended(other)
        finally:
            approving.with_suffix(".go").write_text("go")  # (also when the race failed early)
            said["priya"] = await ended(slow)
        return said

    async def resume() -> list[str]:
        async with Supervisor(make_store(), model=env.model(), tools=env.tools()) as sup:
            assert (await sup.wait(run_id, timeout=30)).value == "done"
        async with make_store() as store:
            return [e.by for e in await store.read(run_id) if isinstance(e, Decision)]

    anyio.run(park)
    said = anyio.run(race)
    recorded = anyio.run(resume)
    (code, out), (other_code, other_out) = said["priya"], said["sam"]
    assert (code, out.startswith("recorded: ")) == (0, True), said
    assert other_code != 0, said
    assert "already approved by priya" in other_out, said
    assert recorded == ["priya"]
    assert env.refunds == ["o-1"]


async def test_many_answers_at_once_for_runs_held_elsewhere_are_all_queued(env: Env) -> None:
    """Answers at the pace of a webhook burst, each for another held run: none waits for
    another's (a lock of the whole store made 1,285 of 1,500 fail, waiting)."""
    await answer_a_burst(env.store, lambda: FileStore(env.root), 200)


async def answer_a_burst(make: Callable[[], Store], other: Callable[[], Store], count: int) -> None:
    """Create ``count`` runs in the store ``make`` opens and hold them, then signal every one
    at once through the store ``other`` opens: each must be queued, within a minute."""
    runs = [f"burst-{i}" for i in range(count)]
    async with make() as store:
        held = [  # each held, as by a worker advancing it
            await store.create(r, [RunStarted(run_id=r, manifest=Manifest(model="m"), messages=[])])
            for r in runs
        ]
        async with other() as answering:
            done: list[bool] = []

            async def deliver(run_id: str) -> None:
                answer = await operate.signal(answering, run_id, "paid", {"n": 1}, signal_id="s1")
                done.append(answer.queued)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for run_id in runs:
                        tg.start_soon(deliver, run_id)
        assert done == [True] * len(runs)
        for journal in held:
            await journal.aclose()


@pytest.mark.parametrize("held", [True, False], ids=["run held: queued", "run free: appended"])
async def test_an_answer_gives_up_on_an_inbox_another_keeps_locked(
    env: Env, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """A post stopped while it held the run's inbox (a process paused, say): an answer for
    the run, held (to be queued) or not (to be appended under the inbox's lock), waits for
    the inbox's lock a bounded time, then is refused, naming the wait, nothing written."""
    import fcntl
    import os

    from tether import JournalIOError

    monkeypatch.setattr("tether.journal._inbox.PATIENCE", 0.3)
    inbox = env.root / "runs" / f"{APPROVE}.inbox"
    fd = os.open(inbox, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        async with contextlib.AsyncExitStack() as stack:
            store = await stack.enter_async_context(FileStore(env.root))
            if held:
                await stack.enter_async_context(await store.open(APPROVE))
            with pytest.raises(JournalIOError, match=r"still being queued after 0\.3 s"):
                await operate.decide(store, APPROVE, REFUND_CALL, approved=True, by="priya")
            assert [e for e in await env.events(APPROVE) if isinstance(e, Decision)] == []
            fcntl.flock(fd, fcntl.LOCK_UN)
            done = await operate.decide(store, APPROVE, REFUND_CALL, approved=True, by="priya")
            assert done.queued is held
    finally:
        os.close(fd)
