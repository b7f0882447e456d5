"""A drive cut off by a cancellation records ``suspended``, also when an append was in flight.

A host that is itself cancelled (a worker stopped at once, a drain past its timeout) cancels
each drive wherever it is. The cancellation may cut short the wait of an append whose group
still lands, the drive's ``resumed`` record say: the stop must then be recorded after it, or
the run's next owner reads the journal as a crash and counts it against the run.
"""

from __future__ import annotations

import pathlib
import threading
from collections import Counter

import anyio

import tether
from tether.journal import FileStore, ModelResponse, Resumed, Suspended, ToolResult, ToolStarted
from tether.supervisor import RunStatus, Supervisor
from tether.testing import FaultyFileOps

from ._helpers import WAIT, craft, delivery_app, manifest_for, read_events

use = tether.ScriptedModel.tool_use


class HeldSyncs(FaultyFileOps):
    """Syncs wait while ``hold`` is set; ``held`` is set once one waits."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def fdatasync(self, fd: int) -> None:
        if self.hold.is_set():
            self.held.set()
            self.release.wait(WAIT)
        super().fdatasync(fd)


async def test_a_drive_cancelled_while_its_resumed_record_lands_records_suspended(
    tmp_path: pathlib.Path,
) -> None:
    ledger: Counter[str] = Counter()
    model, tools = delivery_app(ledger)
    # A run its last owner stopped on purpose after its lookup: the next drive resumes it
    # uncharged, and its first write is its ``resumed`` record with the next model answer.
    await craft(
        tmp_path,
        "run-1",
        [
            tether.journal.RunStarted(
                run_id="run-1",
                manifest=manifest_for(model, tools),
                messages=[{"role": "user", "content": "item x"}],
            ),
            ModelResponse(
                message={
                    "role": "assistant",
                    "content": [use("toolu_1", "lookup", {"item": "item x"})],
                }
            ),
            ToolStarted(call_id="toolu_1", name="lookup"),
            ToolResult(call_id="toolu_1", ok=True, content="item x found"),
            Suspended(reason="the supervisor stopped (graceful shutdown)"),
        ],
    )
    syncs = HeldSyncs()
    syncs.hold.set()
    store = FileStore(tmp_path, file_ops=syncs, io_uring=False)
    host = anyio.CancelScope()

    async def cut_short() -> None:
        await anyio.to_thread.run_sync(syncs.held.wait, WAIT)
        host.cancel()  # the host goes: every drive is cancelled where it is
        await anyio.sleep(0.05)
        syncs.hold.clear()
        syncs.release.set()  # ... and the group it was waiting for lands after all

    async with anyio.create_task_group() as tg:
        tg.start_soon(cut_short)
        with host:
            async with Supervisor(store, model=model, tools=tools, sweep_interval=None):
                await anyio.sleep_forever()
    events = await read_events(tmp_path, "run-1")
    kinds = [type(e).__name__ for e in events[5:]]
    assert kinds[0] == "Resumed", kinds
    assert kinds[-1] == "Suspended", kinds  # the stop is on record after what landed

    async with Supervisor(FileStore(tmp_path), model=model, tools=tools) as sup:
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.DONE
    resumes = [e for e in await read_events(tmp_path, "run-1") if isinstance(e, Resumed)]
    assert [(r.cause, r.charged) for r in resumes] == [("shutdown", False), ("shutdown", False)]
    assert ledger == Counter({"run-1:toolu_2": 1})
