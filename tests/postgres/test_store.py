"""PostgresStore: the store protocol on a real server: runs, leases, fencing, inbox, blobs."""

from __future__ import annotations

import anyio
import asyncpg
import msgspec
import pytest

import tether
from tether import (
    JournalCorruptError,
    JournalLockedError,
    LeaseLostError,
    RunExistsError,
    RunNotFoundError,
)
from tether.journal import AnyEvent, Decision, ModelResponse, RunStarted, ToolResult
from tether.journal._records import encode_event
from tether.postgres import PostgresStore
from tether.postgres._schema import SCHEMA_VERSION

from ..supervisor._helpers import manifest_for

WAIT = 10.0


def _started(run_id: str) -> RunStarted:
    manifest = manifest_for(tether.ScriptedModel(["hi"]), tether.ToolRegistry())
    return RunStarted(run_id=run_id, manifest=manifest, messages=[{"role": "user", "content": "x"}])


def _text(n: int) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": f"answer {n}"})


async def test_a_run_round_trips_through_create_append_read_and_open(
    pg_dsn: str, pg_schema: str
) -> None:
    async with PostgresStore(pg_dsn, schema=pg_schema) as pg_store:
        journal = await pg_store.create("run-1", [_started("run-1")])
        async with journal:
            stamped = await journal.append([_text(1), _text(2)])
            assert [e.seq for e in stamped] == [1, 2]
            assert journal.next_seq == 3
        events = await pg_store.read("run-1")
        assert events == journal.events
        assert [type(e).__name__ for e in events] == [
            "RunStarted",
            "ModelResponse",
            "ModelResponse",
        ]
        async with await pg_store.open("run-1") as again:
            assert again.events == events
            await again.append([_text(3)])
        assert len(await pg_store.read("run-1")) == 4
        assert await pg_store.list_runs() == ["run-1"]
        assert await pg_store.exists("run-1")
        assert not await pg_store.exists("run-2")


async def test_missing_and_duplicate_runs_are_refused(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(pg_dsn, schema=pg_schema) as pg_store:
        with pytest.raises(RunNotFoundError):
            await pg_store.open("nope")
        with pytest.raises(RunNotFoundError):
            await pg_store.read("nope")
        async with await pg_store.create("run-1", [_started("run-1")]):
            pass
        with pytest.raises(RunExistsError):
            await pg_store.create("run-1", [_started("run-1")])
        with pytest.raises(tether.InvalidRunIdError):
            await pg_store.open("../etc")


async def test_a_run_held_by_one_worker_is_refused_to_another_until_released(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
    ):
        held = await a.create("run-1", [_started("run-1")])
        with pytest.raises(JournalLockedError):
            await b.open("run-1")
        with pytest.raises(JournalLockedError):  # and to another task of the same store
            await a.open("run-1")
        assert "run-1" not in await b.run_stats()  # a live lease elsewhere: not b's to sweep
        await held.aclose()
        assert "run-1" in await b.run_stats()
        async with await b.open("run-1") as taken:
            assert taken.epoch == held.epoch + 1


async def test_a_stale_owner_is_fenced_after_its_lease_expires_and_is_taken(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=0.5) as a,
        PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=30) as b,
    ):
        stale = await a.create("run-1", [_started("run-1")])
        await a.pool.execute(  # a's renewals stop reaching the database: it looks dead
            f"UPDATE {pg_schema}.runs SET expires_at = now() - interval '1 second'"
        )
        a_renewer_paused = stale.epoch
        taken = await b.open("run-1")
        assert taken.epoch == a_renewer_paused + 1
        with pytest.raises(LeaseLostError):
            await stale.append([_text(1)])
        with pytest.raises(LeaseLostError):  # and from then on, without asking again
            await stale.fence()
        await taken.append([_text(2)])
        await stale.aclose()  # releasing a lost lease must not free b's
        events = await b.read("run-1")
        assert [e.seq for e in events] == [0, 1]
        assert events[1] == taken.events[1]
        assert await a.pool.fetchval(f"SELECT owner FROM {pg_schema}.runs") == b.owner
        await taken.aclose()


async def test_fence_asks_the_database_once_the_lease_may_have_run_out(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=0.4) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
    ):
        journal = await a.create("run-1", [_started("run-1")])
        await journal.fence()  # fresh lease: no question asked
        # b takes the run over behind a's back (as if a had been paused past its lease).
        await b.pool.execute(f"UPDATE {pg_schema}.runs SET owner = $1, epoch = epoch + 1", b.owner)
        journal.valid_until = 0.0  # a's clock says the lease may have run out
        with pytest.raises(LeaseLostError):
            await journal.fence()
        await journal.aclose()


async def test_leases_are_renewed_while_a_run_is_held(pg_dsn: str, pg_schema: str) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema, lease_ttl=0.6) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
        await a.create("run-1", [_started("run-1")]) as journal,
    ):
        await anyio.sleep(2.0)  # three lease lengths: only renewals keep it
        with pytest.raises(JournalLockedError):
            await b.open("run-1")
        await journal.append([_text(1)])
        await journal.fence()


async def test_damaged_rows_are_corruption_naming_the_run_and_seq(
    pg_dsn: str, pg_schema: str
) -> None:
    async with PostgresStore(pg_dsn, schema=pg_schema) as pg_store:
        async with await pg_store.create("run-1", [_started("run-1")]) as j:
            await j.append([_text(1), _text(2)])
        await pg_store.pool.execute(
            f"UPDATE {pg_schema}.events SET payload = '\\x00ff'::bytea WHERE seq = 1"
        )
        with pytest.raises(JournalCorruptError) as info:
            await pg_store.read("run-1")
        assert info.value.seq == 1
        assert "run-1" in str(info.value)
        with pytest.raises(JournalCorruptError):
            await pg_store.open("run-1")
        # A refused open leaves the run free: repaired, it opens again.
        await pg_store.pool.execute(f"DELETE FROM {pg_schema}.events WHERE seq = 1")
        with pytest.raises(JournalCorruptError, match="skip from seq 1 to 2"):
            await pg_store.read("run-1")
        await pg_store.pool.execute(f"DELETE FROM {pg_schema}.events WHERE seq = 2")
        await pg_store.pool.execute(f"UPDATE {pg_schema}.runs SET next_seq = 1")
        async with await pg_store.open("run-1") as j:
            assert len(j.events) == 1


async def test_the_inbox_queues_answers_and_notifies_every_worker(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as a,
        PostgresStore(pg_dsn, schema=pg_schema) as b,
    ):
        async with await a.create("run-1", [_started("run-1")]):
            pass
        assert not await a.has_inbox("run-1")
        decision = Decision(call_id="c1", approved=True, by="priya")
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.changed)
                await anyio.sleep(0.2)
                await b.post("run-1", decision)
        assert await a.has_inbox("run-1")
        assert (await a.run_stats())["run-1"].inbox
        # Only the run's holder clears its inbox (a worker that lost the run must not).
        assert await b.take_inbox("run-1") == [decision]
        await b.clear_inbox("run-1", 1)
        assert await a.has_inbox("run-1")
        async with await a.open("run-1"):
            assert await a.take_inbox("run-1") == [decision]
            await a.clear_inbox("run-1", 1)
        assert not await a.has_inbox("run-1")
        with pytest.raises(RunNotFoundError):
            await b.post("nope", decision)


@pytest.mark.parametrize("pool_size", [16, 1])
async def test_an_append_unless_queued_is_one_transaction_with_the_inbox_lock(
    pg_dsn: str, pg_schema: str, pool_size: int
) -> None:
    """The holder's append under the lock of the run's inbox: written with nothing queued,
    not with an answer waiting (its numbers given back); a checked post that comes while it
    is in flight reads the journal with it. A pool of one connection is enough (the lock,
    the look and the append share it), and a blob goes to its table before the lock."""
    async with PostgresStore(
        pg_dsn, schema=pg_schema, pool_size=pool_size, blob_threshold=100
    ) as store:
        big = ToolResult(call_id="c1", ok=True, content="x" * 1000)
        async with await store.create("run-1", [_started("run-1")]) as journal:
            written = await store.append_unless_queued(journal, [big, _text(1)])
            assert written is not None
            assert [e.seq for e in written] == [1, 2]
            seen: list[int] = []

            def choose(events: list[AnyEvent], queued: list[AnyEvent]) -> Decision:
                seen.append(len(events))
                return Decision(call_id="c1", approved=True, by="sam")

            async with anyio.create_task_group() as tg:
                tg.start_soon(store.append_unless_queued, journal, [_text(2)])
                tg.start_soon(store.post_checked, "run-1", choose)
            assert seen == [4] or (seen == [3] and journal.next_seq == 3)
            before = journal.next_seq
            assert await store.append_unless_queued(journal, [_text(3)]) is None
            assert journal.next_seq == before
        assert len(await store.read("run-1")) == before
        with pytest.raises(ValueError, match="not a run this PostgresStore holds"):
            await store.append_unless_queued(journal, [_text(4)])


async def test_large_results_go_to_the_blob_table_first(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(pg_dsn, schema=pg_schema, blob_threshold=100) as store:
        big = "x" * 1000
        async with await store.create("run-1", [_started("run-1")]) as j:
            (written,) = await j.append([ToolResult(call_id="c1", ok=True, content=big)])
        assert isinstance(written, ToolResult)
        assert written.content is None
        assert written.blob is not None
        assert await store.load_blob(written.blob) == big


async def test_a_newer_schema_is_refused(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(pg_dsn, schema=pg_schema):
        pass
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"UPDATE {pg_schema}.meta SET value = $1", str(SCHEMA_VERSION + 1))
    finally:
        await conn.close()
    with pytest.raises(tether.StoreSchemaError, match="upgrade tether"):
        async with PostgresStore(pg_dsn, schema=pg_schema):
            pass


async def test_a_schema_name_of_the_longest_allowed_length_still_notifies(pg_dsn: str) -> None:
    schema = "s" * 63
    try:
        async with PostgresStore(pg_dsn, schema=schema) as store:
            async with await store.create("run-1", [_started("run-1")]) as journal:
                await journal.append([Decision(call_id="c1", approved=True, by="x")])
            await store.post("run-1", Decision(call_id="c2", approved=True, by="x"))
            assert await store.has_inbox("run-1")
    finally:
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        finally:
            await conn.close()


async def test_a_schema_at_version_1_is_migrated_in_place(pg_dsn: str, pg_schema: str) -> None:
    from tether.postgres._schema import MIGRATIONS, Sql

    sql = Sql(pg_schema)
    conn = await asyncpg.connect(pg_dsn)
    try:  # a database a version-1 store created
        await conn.execute(sql.create_schema)
        await conn.execute(sql.create_meta)
        await conn.execute(MIGRATIONS[1].format(s=pg_schema))
        await conn.execute(sql.set_version, "1")
        await conn.execute(f"INSERT INTO {pg_schema}.runs (run_id, next_seq) VALUES ('old', 1)")
        await conn.execute(
            f"INSERT INTO {pg_schema}.events VALUES ('old', 0, $1)",
            encode_event(msgspec.structs.replace(_started("old"), seq=0)),
        )
        async with PostgresStore(pg_dsn, schema=pg_schema) as store:
            assert [type(e).__name__ for e in await store.read("old")] == ["RunStarted"]
            async with await store.open("old") as journal:
                await journal.append([_text(1)])
        assert await conn.fetchval(sql.get_version) == str(SCHEMA_VERSION)
        fks = await conn.fetchval(
            "SELECT count(*) FROM pg_constraint WHERE conname = 'events_run_id_fkey' "
            "AND connamespace = $1::regnamespace",
            pg_schema,
        )
        assert fks == 0
    finally:
        await conn.close()


async def test_events_is_one_read_only_view_that_grows_with_each_append(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        PostgresStore(pg_dsn, schema=pg_schema) as pg_store,
        await pg_store.create("run-1", [_started("run-1")]) as journal,
    ):
        view = journal.events
        assert journal.events is view
        with pytest.raises(TypeError):
            view[0] = _text(0)  # type: ignore[index]
        stamped = await journal.append([_text(1)])
        assert len(view) == 2
        assert view[-1:] == stamped
