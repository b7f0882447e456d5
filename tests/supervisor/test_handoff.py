"""``sup.start(..., drive=False)``: a process that only creates runs (a web handler) and
workers that drive them."""

from __future__ import annotations

import pathlib
from collections import Counter

import pytest

import tether
from tether.journal import Resumed
from tether.operate import describe, repin, signal
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, RecordingModel, delivery_app, of_type, read_events


async def test_a_run_created_without_driving_it_is_driven_by_a_worker(
    tmp_path: pathlib.Path,
) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    handler_model = RecordingModel(model)
    async with Supervisor(
        tether.FileStore(tmp_path), model=handler_model, tools=tools, resume=False
    ) as handler:
        await handler.start("run-1", "deliver a kite", drive=False)
        events = await read_events(tmp_path, "run-1")
        assert [type(e).__name__ for e in events] == ["RunStarted"]  # durable, not driven
        worker_model = RecordingModel(delivery_app(ledger)[0])
        async with Supervisor(
            tether.FileStore(tmp_path), model=worker_model, tools=tools, sweep_interval=0.05
        ) as worker:
            assert await handler.wait("run-1", timeout=WAIT) == RunStatus.DONE
            view = await worker.inspect("run-1")
            assert (view.status, view.restarts) == (RunStatus.DONE, 0)  # not a restart
    assert handler_model.requests == []  # every model call was the worker's
    assert len(worker_model.requests) == 3
    assert ledger == Counter({"run-1:toolu_2": 1})
    (resumed,) = of_type(await read_events(tmp_path, "run-1"), Resumed)
    assert (resumed.cause, resumed.charged) == ("first drive", False)
    assert describe(resumed, {}).startswith("first driven on ")


async def test_its_own_sweep_drives_it_when_it_has_one(tmp_path: pathlib.Path) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, sweep_interval=0.05
    ) as sup:
        await sup.start("run-1", "deliver a kite", drive=False)
        assert await sup.wait("run-1", timeout=WAIT) == RunStatus.DONE
    assert sum(ledger.values()) == 1


@pytest.mark.parametrize("answer", ["signal", "repin"])
async def test_a_signal_or_a_repin_before_its_first_drive_is_no_crash(
    tmp_path: pathlib.Path, answer: str
) -> None:
    """Written for the run from outside, after its creation: its last own record is still
    its start, so its first drive is a first drive, not a restart after a crash (with no
    restart allowed, it would have been parked as a crash loop)."""
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    no_restarts = tether.Budgets(max_restarts=0)
    async with Supervisor(
        tether.FileStore(tmp_path), model=model, tools=tools, resume=False
    ) as handler:
        await handler.start("run-1", "deliver a kite", drive=False, budgets=no_restarts)
    async with tether.FileStore(tmp_path) as store:  # as `tether signal` and `tether repin` do
        if answer == "signal":
            await signal(store, "run-1", "customer.replied", {"text": "hi"}, signal_id="m1")
        else:
            deliver = tools.get("deliver")  # a second version of it, which the run accepts
            v2 = tools.register(deliver.fn, name="deliver", version="2", policy=deliver.policy)
            await repin(store, "run-1", tools=[v2.pin()], by="priya")
    async with Supervisor(
        tether.FileStore(tmp_path), model=delivery_app(ledger)[0], tools=tools
    ) as worker:
        assert await worker.wait("run-1", timeout=WAIT) == RunStatus.DONE
        assert (await worker.inspect("run-1")).restarts == 0
    (resumed,) = of_type(await read_events(tmp_path, "run-1"), Resumed)
    assert (resumed.cause, resumed.charged) == ("first drive", False)
    assert ledger == Counter({"run-1:toolu_2": 1})
