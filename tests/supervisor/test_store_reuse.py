"""One store object used by several supervisors, as scripts, notebooks and tests use it.

A store is entered by each supervisor given it (and by the application, if it enters it
itself); it opens at the first entry, closes when the last holder leaves, and opens again at
the next entry. Each case runs on a ``FileStore`` and on a ``PostgresStore``.
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Callable

import anyio
import pytest

import tether
from tether.supervisor import RunStatus, Supervisor

from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ._helpers import WAIT, delivery_app

MakeStore = Callable[[], tether.FileStore | tether.PostgresStore]


@pytest.fixture(params=["file", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> MakeStore:
    """A function making the store of the case (each call a new object on the same data)."""
    if request.param == "file":
        return lambda: tether.FileStore(tmp_path / "store")
    dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
    return lambda: tether.PostgresStore(dsn, schema=schema)


async def _finish(sup: Supervisor, run_id: str) -> RunStatus:
    await sup.start(run_id, f"item {run_id}")
    return await sup.wait(run_id, timeout=WAIT)


async def test_supervisors_one_after_another_on_one_store(make_store: MakeStore) -> None:
    """A script (or a test) that makes one store and gives it to one supervisor, then to the
    next: the first closes it as it leaves, and the second opens it again."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    store = make_store()
    for run_id in ("run-1", "run-2", "run-3"):
        async with Supervisor(store, model=model, tools=tools) as sup:
            assert await _finish(sup, run_id) is RunStatus.DONE
        assert not store.entered
    assert ledger == Counter({f"run-{i}:toolu_2": 1 for i in (1, 2, 3)})


def test_a_store_entered_again_from_another_event_loop(make_store: MakeStore) -> None:
    """A notebook or a script that calls ``anyio.run`` (``asyncio.run``) once per step with
    the same store object: each entry opens it on that step's event loop."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    store = make_store()

    async def step(run_id: str) -> RunStatus:
        async with Supervisor(store, model=model, tools=tools) as sup:
            return await _finish(sup, run_id)

    assert anyio.run(step, "run-1") is RunStatus.DONE
    assert anyio.run(step, "run-2") is RunStatus.DONE
    assert sum(ledger.values()) == 2


async def test_a_store_the_application_holds_outlives_each_supervisor(
    make_store: MakeStore,
) -> None:
    """A test fixture or a service that enters the store itself: supervisors come and go
    inside it, and the store stays open for the application between them."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    async with make_store() as store:
        for run_id in ("run-1", "run-2"):
            async with Supervisor(store, model=model, tools=tools) as sup:
                assert await _finish(sup, run_id) is RunStatus.DONE
            assert store.entered
            assert [type(e).__name__ for e in await store.read(run_id)][-1] == "RunFinished"
        journal = await store.create("by-hand")  # the application's own use, in between
        await journal.aclose()
    assert not store.entered


async def test_two_supervisors_side_by_side_on_one_file_store(tmp_path: pathlib.Path) -> None:
    """Two supervisors entered together (two tasks) on one ``FileStore``: the first to leave
    does not close it under the other, which goes on writing; the last to leave closes it."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    store = tether.FileStore(tmp_path / "store")
    second_entered, first_left = anyio.Event(), anyio.Event()
    statuses: dict[str, RunStatus] = {}

    async def first() -> None:
        async with Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
            statuses["run-a"] = await _finish(sup, "run-a")
            await second_entered.wait()
        first_left.set()

    async def second() -> None:
        async with Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
            second_entered.set()
            await first_left.wait()
            assert store.entered
            statuses["run-b"] = await _finish(sup, "run-b")  # written after the first left

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
    assert statuses == {"run-a": RunStatus.DONE, "run-b": RunStatus.DONE}
    assert not store.entered
    assert ledger == Counter({"run-a:toolu_2": 1, "run-b:toolu_2": 1})


async def test_a_postgres_store_open_in_another_task_is_refused_at_entry(
    pg_dsn: str,  # noqa: F811
    pg_schema: str,  # noqa: F811
) -> None:
    """A ``PostgresStore`` runs its lease renewer and listener in the task that opened it,
    which alone can close it: a supervisor entering it from another task meanwhile is refused
    at entry, saying what to do, and the first one carries on undisturbed."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    store = tether.PostgresStore(pg_dsn, schema=pg_schema)
    refused: list[str] = []

    async def second() -> None:
        with pytest.raises(RuntimeError, match="open in another task") as exc:
            async with Supervisor(store, model=model, tools=tools):
                pass  # pragma: no cover - refused
        refused.append(str(exc.value))

    async with Supervisor(store, model=model, tools=tools, sweep_interval=None) as sup:
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
        assert store.entered
        assert await _finish(sup, "run-a") is RunStatus.DONE
    assert "give each supervisor that runs at the same time a PostgresStore" in refused[0]
    assert not store.entered
    async with Supervisor(store, model=model, tools=tools) as sup:  # free again: it opens
        assert await _finish(sup, "run-b") is RunStatus.DONE


async def test_a_closed_store_says_so_until_it_is_entered_again(make_store: MakeStore) -> None:
    store = make_store()
    with pytest.raises(RuntimeError, match="as an async context manager first"):
        await store.create("run-1")
    async with store:
        await (await store.create("run-1")).aclose()
    with pytest.raises(RuntimeError, match=r"is closed \(enter it again to use it\)"):
        await store.create("run-2")
    async with store:
        await (await store.create("run-2")).aclose()
        assert sorted(await store.list_runs()) == ["run-1", "run-2"]


async def test_aclose_closes_the_store_under_every_holder(make_store: MakeStore) -> None:
    """``aclose`` is the way to close a store whoever holds it; their next write says it is
    closed, and their exits afterwards do nothing."""
    store = make_store()
    async with store, store:
        journal = await store.create("run-1")
        await store.aclose()
        assert not store.entered
        with pytest.raises(tether.JournalClosedError):
            await journal.append([tether.journal.Suspended()])
        with pytest.raises(RuntimeError, match="is closed"):
            await store.create("run-2")
    assert not store.entered


async def test_entries_racing_open_a_file_store_once(tmp_path: pathlib.Path) -> None:
    store = tether.FileStore(tmp_path / "store")
    entered = 0

    async def hold(done: anyio.Event) -> None:
        nonlocal entered
        async with store:
            entered += 1
            await done.wait()
            assert store.entered

    done = anyio.Event()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(hold, done)
            while entered < 5:
                await anyio.sleep(0.01)
            await (await store.create("run-1")).aclose()
            done.set()
    assert not store.entered
