"""The connection drops, or the server restarts, while a commit is in flight (RELIABILITY P4).

The outcome of such a statement is unknown to the client. The store must learn it by reading
``(run_id, seq)`` and never re-run it blindly: no record lost, none written twice.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
import asyncpg
import pytest

import tether
from tether.journal import AnyEvent, ModelResponse, RunStarted
from tether.models import ContentBlock, Message
from tether.postgres import PostgresStore
from tether.supervisor import RunStatus, Supervisor
from tether.testing._pgserver import PostgresServer

from ..supervisor._helpers import manifest_for
from ._proxy import CuttingProxy

use = tether.ScriptedModel.tool_use


def _started(run_id: str) -> RunStarted:
    manifest = manifest_for(tether.ScriptedModel(["hi"]), tether.ToolRegistry())
    return RunStarted(run_id=run_id, manifest=manifest, messages=[{"role": "user", "content": "x"}])


def _text(tag: str) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": tag})


async def test_appends_whose_connection_is_cut_are_neither_lost_nor_doubled(
    pg_server: PostgresServer, pg_schema: str
) -> None:
    rng = random.Random(3)
    async with CuttingProxy(pg_server.port) as proxy:
        dsn = f"postgresql://tether@127.0.0.1:{proxy.port}/tether"
        async with PostgresStore(dsn, schema=pg_schema, pool_size=4) as store:
            acked: dict[str, list[AnyEvent]] = {}

            async def writer(run_id: str) -> None:
                journal = await store.create(run_id, [_started(run_id)])
                async with journal:
                    acked[run_id] = []
                    for i in range(60):
                        tag = f"{run_id}-{i}"
                        if rng.random() < 0.2:
                            tag += f" CUT-{rng.choice(['AFTER', 'BEFORE'])}-{run_id}-{i}."
                        acked[run_id] += await journal.append([_text(tag)])

            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(writer, f"run-{n}")
    assert len(proxy.cut) > 20, "the proxy cut connections mid-statement"
    assert any(b"AFTER" in c for c in proxy.cut)
    assert any(b"BEFORE" in c for c in proxy.cut)
    async with PostgresStore(pg_server.dsn, schema=pg_schema) as direct:
        for run_id, events in acked.items():
            stored = await direct.read(run_id)
            assert stored[1:] == events, "exactly the acknowledged appends, each once"
            contents = [e.message["content"] for e in stored[1:]]  # type: ignore[union-attr]
            assert len(set(contents)) == len(contents) == 60


@pytest.mark.slow
async def test_runs_survive_a_server_restart_mid_flight_with_each_effect_once(
    pg_server: PostgresServer, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    effects: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def lookup(item: str) -> str:
        """Look an item up."""
        await anyio.sleep(random.uniform(0.1, 0.3))
        return f"{item} found"

    @tools.tool(policy="idempotency_key")
    async def deliver(item: str, ctx: tether.ToolContext) -> dict[str, Any]:
        """Deliver an item (the service honours idempotency keys)."""
        attempts[ctx.idempotency_key] += 1
        effects[ctx.idempotency_key] = 1
        return {"ok": True}

    def script(messages: list[Message]) -> list[ContentBlock] | str:
        step = sum(1 for m in messages if m["role"] == "assistant")
        item = str(messages[0]["content"])
        if step < 3:
            return [use(f"toolu_{step}", "lookup", {"item": f"{item}/{step}"})]
        if step == 3:
            return [use("toolu_d", "deliver", {"item": item})]
        return f"delivered {item}"

    ids = [f"run-{i:03d}" for i in range(60)]
    store = PostgresStore(pg_server.dsn, schema=pg_schema, lease_ttl=30)
    async with Supervisor(store, model=tether.ScriptedModel(script), tools=tools) as sup:
        async with anyio.create_task_group() as tg:
            for run_id in ids:
                tg.start_soon(sup.start, run_id, run_id)
        await anyio.sleep(0.1)
        assert not effects, "the restart comes while every run is in flight"
        await anyio.to_thread.run_sync(pg_server.restart)  # an immediate stop: like a crash
        statuses = [await sup.wait(run_id, timeout=120) for run_id in ids]
    assert Counter(statuses) == {RunStatus.DONE: len(ids)}
    lost = [r for r in caplog.records if "connection lost during an append" in r.getMessage()]
    assert lost, "appends were in flight when the server went down"
    assert set(effects) == {f"{r}:toolu_d" for r in ids}
    async with PostgresStore(pg_server.dsn, schema=pg_schema) as direct:
        for run_id in ids:
            events = await direct.read(run_id)
            assert [e.seq for e in events] == list(range(len(events)))
            assert len(events) == 1 + 4 * 3 + 1 + 1  # started, 4 x (answer, start, result), ...


async def test_a_cut_append_still_waiting_on_the_server_is_settled_not_called_lost(
    pg_server: PostgresServer, pg_schema: str
) -> None:
    """The cut statement is still queued on its server process (behind a row lock) when the
    client looks for it. The store must end that process before reading, then send again:
    the append is acknowledged once, not reported as a lost lease."""
    async with CuttingProxy(pg_server.port) as proxy:
        dsn = f"postgresql://tether@127.0.0.1:{proxy.port}/tether"
        async with PostgresStore(dsn, schema=pg_schema, pool_size=2) as store:
            journal = await store.create("run-1", [_started("run-1")])
            blocker = await asyncpg.connect(pg_server.dsn)
            try:
                tx = blocker.transaction()
                await tx.start()
                await blocker.execute(f"SELECT 1 FROM {pg_schema}.runs FOR UPDATE")

                async def unblock() -> None:
                    await anyio.sleep(1.0)
                    await tx.commit()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(unblock)
                    (written,) = await journal.append([_text("x CUT-AFTER-held.")])
            finally:
                await blocker.close()
            assert written.seq == 1
            await journal.append([_text("after")])
            await journal.aclose()
    assert proxy.cut == [b"CUT-AFTER-held."]
    async with PostgresStore(pg_server.dsn, schema=pg_schema) as direct:
        events = await direct.read("run-1")
    assert [e.seq for e in events] == [0, 1, 2]


async def test_an_internal_client_error_is_a_lost_connection_not_a_broken_run(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg reports a connection whose protocol state went wrong under it (a statement cut
    off mid-flight) as ``InternalClientError: cannot switch to state 12``. The append's outcome
    is then unknown, as after any lost connection: the store learns it and sends again, and the
    run goes on instead of breaking."""
    async with PostgresStore(dsn=pg_dsn, schema=pg_schema, pool_size=2) as store:
        journal = await store.create("run-1", [_started("run-1")])
        send = store._send
        failed: list[str] = []

        async def desynced_once(backend: list[int], query: str, *args: Any) -> str:
            if not failed:
                failed.append(query)
                raise asyncpg.exceptions.InternalClientError(
                    "cannot switch to state 12; another operation (2) is in progress"
                )
            return await send(backend, query, *args)

        monkeypatch.setattr(store, "_send", desynced_once)
        (written,) = await journal.append([_text("after the desync")])
        assert failed, "the first send raised"
        assert written.seq == 1
        assert not journal.broken
        await journal.aclose()
        events = await store.read("run-1")
    assert [e.seq for e in events] == [0, 1]
