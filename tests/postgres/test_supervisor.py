"""The Supervisor, unchanged, on a PostgresStore: many runs, approvals, answers from elsewhere."""

from __future__ import annotations

import contextlib
import pathlib
from collections import Counter

import anyio
import pytest

import tether
import tether.supervisor._loop
from tether.journal import Decision, RunStarted
from tether.postgres import PostgresStore
from tether.supervisor import RunStatus, Supervisor

from ..cli._stores import Env
from ..operate.test_verbs import answer_a_burst, race_a_slow_answer, race_approvals
from ..supervisor._helpers import delivery_app, gated_tools, lookup_and_send_model

use = tether.ScriptedModel.tool_use
WAIT = 30.0


def _approval_app(sent: list[str]) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    tools = tether.ToolRegistry()

    @tools.tool(policy="idempotency_key", approval=True)
    async def send(text: str, ctx: tether.ToolContext) -> str:
        """Send a text."""
        sent.append(ctx.idempotency_key)
        return "sent"

    return tether.ScriptedModel([[use("toolu_1", "send", {"text": "hi"})], "done"]), tools


async def test_two_hundred_runs_finish_with_each_side_effect_once(
    pg_dsn: str, pg_schema: str
) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    ids = [f"run-{i:03d}" for i in range(200)]
    store = PostgresStore(pg_dsn, schema=pg_schema)
    async with Supervisor(store, model=model, tools=tools) as sup:
        async with anyio.create_task_group() as tg:
            for run_id in ids:
                tg.start_soon(sup.start, run_id, f"item {run_id}")
        statuses = [await sup.wait(run_id, timeout=WAIT) for run_id in ids]
        assert Counter(statuses) == {RunStatus.DONE: 200}
        view = await sup.inspect("run-007")
        assert view.final_text == "delivered item run-007"
        assert (view.model_calls, view.tool_calls) == (3, 2)
    assert ledger == Counter({f"{r}:toolu_2": 1 for r in ids})
    async with PostgresStore(pg_dsn, schema=pg_schema) as check:
        assert await check.run_stats() == {}  # every run finished: nothing left to sweep
        owners = await check.pool.fetch(f"SELECT DISTINCT owner FROM {pg_schema}.runs")
        assert [r[0] for r in owners] == [None]  # every lease released


async def test_a_decision_recorded_elsewhere_wakes_the_worker_at_once(
    pg_dsn: str, pg_schema: str
) -> None:
    sent: list[str] = []
    model, tools = _approval_app(sent)
    # The sweep interval is far longer than the test: only the notification can wake it.
    store = PostgresStore(pg_dsn, schema=pg_schema)
    async with Supervisor(store, model=model, tools=tools, sweep_interval=600) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        # Another machine records the decision (as `tether approve --store ...` does).
        async with (
            PostgresStore(pg_dsn, schema=pg_schema) as other,
            await other.open("run-1") as journal,
        ):
            await journal.append([Decision(call_id="toolu_1", approved=True, by="priya")])
        with anyio.fail_after(WAIT):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.05)
    assert sent == ["run-1:toolu_1"]


async def test_a_decision_for_a_run_another_worker_holds_goes_through_its_inbox(
    pg_dsn: str, pg_schema: str
) -> None:
    sent: list[str] = []
    gate = anyio.Event()
    tools = gated_tools(sent, gate)

    owner_store = PostgresStore(pg_dsn, schema=pg_schema)
    async with Supervisor(owner_store, model=lookup_and_send_model(), tools=tools) as owner:
        await owner.start("run-1", "go")
        other_store = PostgresStore(pg_dsn, schema=pg_schema)
        async with Supervisor(
            other_store, model=lookup_and_send_model(), tools=tools, resume=False
        ) as other:
            with anyio.fail_after(WAIT):
                while not (await other.inspect("run-1")).model_calls:
                    await anyio.sleep(0.01)
            await other.decide("run-1", "toolu_2", approved=True, by="priya")
            assert await other_store.has_inbox("run-1")
        gate.set()
        assert await owner.wait("run-1", timeout=WAIT) is RunStatus.DONE
        assert not await owner_store.has_inbox("run-1")
    assert sent == ["run-1:toolu_2"]


async def test_a_run_started_just_before_the_supervisor_exits_is_not_left_held(
    pg_dsn: str, pg_schema: str
) -> None:
    sent: list[str] = []
    model, tools = _approval_app(sent)
    async with PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=30) as store:
        async with Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
            await sup.start("run-1", "go")  # its child has not run a single step yet
        async with PostgresStore(pg_dsn, schema=pg_schema) as other:
            journal = await other.open("run-1")  # released, not held for 30 s
            await journal.aclose()


async def test_a_failing_lease_renewal_does_not_take_the_store_down(
    pg_dsn: str, pg_schema: str
) -> None:
    async def broken(journals: object) -> None:
        raise ValueError("renewal exploded")

    async with PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=0.3) as store:
        store.renew = broken  # type: ignore[method-assign]
        async with await store.create("run-1", []):
            await anyio.sleep(0.5)  # the renewer fails at least once meanwhile
        assert await store.exists("run-1")


async def test_wait_on_a_run_a_dead_worker_held_waits_for_the_takeover(
    pg_dsn: str, pg_schema: str
) -> None:
    sent: list[str] = []
    model, tools = _approval_app(sent)
    rt_manifest = tether.supervisor._loop.build_manifest(
        tether.supervisor._loop.Runtime(model=model, tools=tools, load_blob=_no_blob),
        system=None,
        app_version="",
    )

    async def no_renewal(journals: object) -> None:
        pass

    async with PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=1.0) as dead:
        dead.renew = no_renewal  # type: ignore[method-assign]
        started = RunStarted(
            run_id="run-1", manifest=rt_manifest, messages=[{"role": "user", "content": "go"}]
        )
        held = await dead.create("run-1", [started])  # then the worker "dies" holding it
        store = PostgresStore(pg_dsn, schema=pg_schema)
        async with Supervisor(store, model=model, tools=tools, sweep_interval=0.2) as sup:
            status = await sup.wait("run-1", timeout=WAIT)
        assert status is RunStatus.WAITING_FOR_APPROVAL  # taken over once the lease ran out
        await held.aclose()


async def _no_blob(ref: object) -> object:
    raise AssertionError("no blobs here")


async def test_a_failed_run_retried_from_elsewhere_is_reopened_and_finished(
    pg_dsn: str, pg_schema: str
) -> None:
    """``tether retry --store ...`` from another machine: the run's row is active again and a
    worker finishes it."""
    from ..supervisor._helpers import WAIT as SHORT

    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    async with Supervisor(
        PostgresStore(pg_dsn, schema=pg_schema), model=model, tools=tools, sweep_interval=0.2
    ) as sup:
        await sup.start("run-1", "item x", budgets=tether.Budgets(max_model_calls=2))
        assert await sup.wait("run-1", timeout=SHORT) is RunStatus.FAILED
        async with PostgresStore(pg_dsn, schema=pg_schema, create=False) as other:
            journal = await other.open("run-1")
            async with journal:
                await journal.append(
                    [tether.journal.Retried(by="ops", budgets=tether.Budgets(max_model_calls=3))]
                )
                # Looked at while this store holds the run: once it lets go, the test's own
                # supervisor (woken by the release) may hold it at once, and a listing leaves
                # out the runs another live worker holds.
                assert list(await other.run_stats()) == ["run-1"]  # active again
        with anyio.fail_after(SHORT):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.05)
    assert ledger == Counter({"run-1:toolu_2": 1})


def test_an_approval_and_a_rejection_raced_by_two_processes_while_a_worker_holds_the_run(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str
) -> None:
    """As on files (``tests/operate/test_verbs.py``): one of the two is queued, the other is
    refused naming it, and the worker records the one queued."""
    env = Env(tmp_path / "unused")
    race_approvals(
        env,
        lambda: PostgresStore(pg_dsn, schema=pg_schema),
        ["--store", pg_dsn, "--schema", pg_schema],
    )


def test_an_approval_appended_slowly_and_a_rejection_queued_meanwhile_are_judged_together(
    tmp_path: pathlib.Path, pg_dsn: str, pg_schema: str
) -> None:
    """As on files (``tests/operate/test_verbs.py``): the approval's append statement is slow;
    the rejection, queued meanwhile from another process, is refused naming the approval."""
    env = Env(tmp_path / "unused")
    race_a_slow_answer(
        env,
        lambda: PostgresStore(pg_dsn, schema=pg_schema),
        ["--store", pg_dsn, "--schema", pg_schema],
        tmp_path / "marks",
    )


@pytest.mark.parametrize("pool_size", [16, 1])
@pytest.mark.parametrize("held", [True, False], ids=["held: queued", "free: appended"])
async def test_an_answer_waits_for_the_inbox_lock_and_gives_up_naming_the_wait(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, pool_size: int, held: bool
) -> None:
    """Another session holds the lock on the run's inbox: an answer waits for it, queued for
    a held run or appended under that lock for a free one, and is refused, nothing queued or
    written, once it has waited too long; let go, it is queued or recorded (with a pool of one
    connection too: the lock, the reads and the post or the append share one)."""
    import asyncpg

    from tether import JournalIOError, operate

    monkeypatch.setattr("tether.postgres._store.POSTING_PATIENCE", 0.3)
    gate = anyio.Event()
    gate.set()
    tools, model = gated_tools([], gate), lookup_and_send_model()
    async with Supervisor(PostgresStore(pg_dsn, schema=pg_schema), model=model, tools=tools) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=10) is RunStatus.WAITING_FOR_APPROVAL
    other = await asyncpg.connect(pg_dsn)
    try:
        key = f"{pg_schema}:inbox:run-1"
        assert await other.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", key)
        async with contextlib.AsyncExitStack() as stack:
            store = await stack.enter_async_context(
                PostgresStore(pg_dsn, schema=pg_schema, pool_size=pool_size)
            )
            if held:
                await stack.enter_async_context(await store.open("run-1"))
            with pytest.raises(JournalIOError, match=r"still being queued after 0\.3 s"):
                await operate.decide(store, "run-1", "toolu_2", approved=True, by="priya")
            assert await store.peek_inbox("run-1") == []
            assert [e for e in await store.read("run-1") if isinstance(e, Decision)] == []
            await other.execute("SELECT pg_advisory_unlock(hashtext($1))", key)
            done = await operate.decide(store, "run-1", "toolu_2", approved=True, by="priya")
            assert done.queued is held
            if not held:
                assert done.record.seq > 0
                assert await store.holder("run-1") is None  # the answer's hold let go
    finally:
        await other.close()


async def test_a_burst_of_answers_for_held_runs_never_waits_on_the_pool(
    pg_dsn: str, pg_schema: str
) -> None:
    """More answers at once than the pool has connections, each for another held run: each
    checks and queues on one connection, so none waits for one another holds (each holding
    one for a lock while needing a second for its reads, they waited for ever)."""
    await answer_a_burst(
        lambda: PostgresStore(pg_dsn, schema=pg_schema, pool_size=2),
        lambda: PostgresStore(pg_dsn, schema=pg_schema, pool_size=2),
        8,
    )


async def test_answers_waiting_for_one_runs_inbox_leave_the_pool_to_the_others(
    pg_dsn: str, pg_schema: str
) -> None:
    """Another session keeps run x's inbox locked: the answers for x that wait hold no
    connection, so the store's appends to another run go on (they waited ten seconds, and
    its lease was lost)."""
    import asyncpg

    from tether import operate
    from tether.journal import Manifest, Signal

    def started(run_id: str) -> list[RunStarted]:
        return [RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])]

    other = await asyncpg.connect(pg_dsn)
    try:
        async with PostgresStore(pg_dsn, schema=pg_schema, pool_size=2) as store:
            x, r = await store.create("x", started("x")), await store.create("r", started("r"))
            key = f"{pg_schema}:inbox:x"
            assert await other.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", key)
            done: list[bool] = []

            async def deliver(n: int) -> None:  # (x is held by this very store)
                got = await operate.signal(store, "x", "paid", n, signal_id=f"s{n}")
                done.append(got.queued)

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(deliver, n)
                await anyio.sleep(0.2)
                with anyio.fail_after(3):  # the store's own work goes on meanwhile
                    await r.append([Signal(name="e", signal_id="own", payload=1)])
                await other.execute("SELECT pg_advisory_unlock(hashtext($1))", key)
            assert done == [True, True, True]
            await x.aclose()
            await r.aclose()
    finally:
        await other.close()
