"""Leases under real races (RELIABILITY rows P1 and P2): one winner, stale writers fenced."""

from __future__ import annotations

import random
from contextlib import AsyncExitStack

import anyio
import asyncpg
import pytest

import tether
from tether import JournalLockedError, LeaseLostError
from tether.journal import AnyEvent, ModelResponse, RunStarted
from tether.postgres import PgJournal, PostgresStore
from tether.postgres._schema import Sql

from ..supervisor._helpers import manifest_for

ROUNDS = 1000


def _started(run_id: str) -> RunStarted:
    manifest = manifest_for(tether.ScriptedModel(["hi"]), tether.ToolRegistry())
    return RunStarted(run_id=run_id, manifest=manifest, messages=[{"role": "user", "content": "x"}])


def _text(tag: str) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": tag})


@pytest.mark.slow
async def test_workers_racing_to_claim_a_run_have_exactly_one_winner(
    pg_dsn: str, pg_schema: str
) -> None:
    """P1: 2-32 workers (stores with their own connections) race at a barrier, 1,000 rounds."""
    async with PostgresStore(pg_dsn, schema=pg_schema) as setup:
        await (await setup.create("run-1", [_started("run-1")])).aclose()
    double_claims = 0
    async with AsyncExitStack() as stack:
        stores = [
            await stack.enter_async_context(PostgresStore(pg_dsn, schema=pg_schema, pool_size=1))
            for _ in range(32)
        ]
        epoch = 1
        for round_no in range(ROUNDS):
            racers = stores[: 2 + round_no % 31]
            barrier = anyio.Event()
            winners: list[PgJournal] = []
            refused: list[PostgresStore] = []
            async with anyio.create_task_group() as tg:
                for s in racers:
                    tg.start_soon(_race, s, barrier, winners, refused)
                await anyio.sleep(0)
                barrier.set()
            double_claims += len(winners) - 1
            assert len(winners) == 1, f"round {round_no}: {len(winners)} winners"
            assert len(refused) == len(racers) - 1
            assert winners[0].epoch == epoch + 1, "the epoch rises by exactly one per claim"
            epoch = winners[0].epoch
            await winners[0].aclose()
    assert double_claims == 0


async def _race(
    store: PostgresStore,
    barrier: anyio.Event,
    winners: list[PgJournal],
    refused: list[PostgresStore],
) -> None:
    await barrier.wait()
    try:
        winners.append(await store.open("run-1"))
    except JournalLockedError:
        refused.append(store)


async def test_a_takeover_committing_between_a_stale_check_and_insert_fences_it(
    pg_dsn: str, pg_schema: str
) -> None:
    """P2, the tight interleaving: the stale append's statement starts, then the takeover
    commits, then the append gets the row. It must see the new epoch and insert nothing."""
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
    ):
        stale = await a.create("run-1", [_started("run-1")])
        sql = Sql(pg_schema)
        blocker = await asyncpg.connect(pg_dsn)
        taker = await asyncpg.connect(pg_dsn)
        try:
            await taker.execute(
                f"UPDATE {pg_schema}.runs SET expires_at = now() - interval '1 second'"
            )
            # Hold the run's row so both statements queue behind it, in a known order.
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute(f"SELECT 1 FROM {pg_schema}.runs FOR UPDATE")
            async with anyio.create_task_group() as tg:
                claimed: list[int | None] = []

                async def take() -> None:
                    claimed.append(await taker.fetchval(sql.claim, "run-1", b.owner, 30.0))

                async def append() -> None:
                    with pytest.raises(LeaseLostError):
                        await stale.append([_text("stale")])

                tg.start_soon(take)
                await _until_waiting(blocker, 1)
                tg.start_soon(append)
                await _until_waiting(blocker, 2)
                await tx.commit()
            assert claimed == [stale.epoch + 1]
        finally:
            await blocker.close()
            await taker.close()
        events = await b.read("run-1")
        assert [e.seq for e in events] == [0]
        await stale.aclose()


async def _until_waiting(conn: asyncpg.Connection, n: int) -> None:
    """Wait until ``n`` other backends wait for a lock."""
    with anyio.fail_after(10):
        while (
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            < n
        ):
            await anyio.sleep(0.01)


@pytest.mark.slow
async def test_a_stale_writer_racing_takeovers_never_lands_a_write_after_them(
    pg_dsn: str, pg_schema: str
) -> None:
    """P2, at random: a writer appends in a tight loop while another worker takes the run at a
    random moment. Every write the stale one got acknowledged is in what the taker read when
    it claimed; nothing of it lands afterwards; no seq is written twice."""
    rng = random.Random(7)
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
    ):
        for round_no in range(100):
            await _stale_writer_round(a, b, f"run-{round_no}", rng)


async def _stale_writer_round(
    a: PostgresStore, b: PostgresStore, run_id: str, rng: random.Random
) -> None:
    stale = await a.create(run_id, [_started(run_id)])
    acked: list[AnyEvent] = []
    rejected = 0

    async def writer() -> None:
        nonlocal rejected
        for i in range(1000):
            try:
                acked.extend(await stale.append([_text(f"a{i}")]))
            except LeaseLostError:
                rejected += 1
                return

    taken: list[PgJournal] = []

    async def taker() -> None:
        await anyio.sleep(rng.uniform(0, 0.05))
        await b.pool.execute(
            f"UPDATE {b.sql.schema}.runs SET expires_at = now() WHERE run_id = $1", run_id
        )
        taken.append(await b.open(run_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        tg.start_soon(taker)
    (journal,) = taken
    seen_at_claim = list(journal.events)
    assert rejected == 1, "the stale writer was fenced"
    assert seen_at_claim[1:] == acked, "every acknowledged write, nothing more"
    await journal.append([_text("b")])
    await journal.aclose()
    await stale.aclose()
    final = await b.read(run_id)
    assert [e.seq for e in final] == list(range(len(final)))
    assert final == [*seen_at_claim, final[-1]]


async def test_a_claim_or_create_cancelled_at_any_moment_leaves_the_run_free(
    pg_dsn: str, pg_schema: str
) -> None:
    """A supervisor stopping cancels claims in flight. A claim that landed while its caller was
    cancelled (the reply, or giving the connection back, still to come) used to hold the run for
    a lease nobody renews or releases: the next worker was refused until it ran out."""
    rng = random.Random(7)
    async with PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=60) as store:
        await (await store.create("run-1", [])).aclose()
        cancelled = {"open": 0, "create": 0}
        for attempt in range(300):
            run_id = f"run-new-{attempt}"
            with anyio.move_on_after(rng.uniform(0, 0.004)) as scope:
                await (await store.open("run-1")).aclose()
                await (await store.create(run_id, [_started(run_id)])).aclose()
            if scope.cancelled_caught:
                cancelled["create" if await store.exists(run_id) else "open"] += 1
            assert await store.holder("run-1") is None, f"attempt {attempt}: run-1 left held"
            assert await store.holder(run_id) is None, f"attempt {attempt}: {run_id} left held"
    assert min(cancelled.values()) > 10, cancelled  # both statements were cut short often
