"""Answers for a run another process holds wait in its inbox; the owner records them."""

from __future__ import annotations

import pathlib

import anyio
import pytest

import tether
from tether.journal import Decision, FileStore
from tether.supervisor import RunStatus, Supervisor

from ._helpers import WAIT, gated_tools, lookup_and_send_model, of_type, read_events

use = tether.ScriptedModel.tool_use


@pytest.mark.parametrize(
    ("deaf", "sweeps"),
    [(False, 3600.0), (True, 0.05), (True, None)],
    ids=["", "deaf watch", "deaf watch, no sweeps"],
)
async def test_a_decision_for_a_run_held_elsewhere_is_recorded_by_its_owner(
    tmp_path: pathlib.Path, deaf: bool, sweeps: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The post moves the inbox's mark, so the owner looks when the run rests at the gate,
    though it created the run and found no inbox before (its sweeps, hourly, do not come).
    With a watch that hears of no inbox (a post through another machine's kernel) the run
    parks with the decision still queued; the owner's sweep finds it there and resumes the
    run, and that drive looks whatever the mark says. Without sweeps, nothing would: then the
    mark is not trusted, and the drive looks when the run rests."""
    monkeypatch.setattr("tether.supervisor._halts.HALT_POLL", 3600.0)  # the drive's looks alone
    if deaf:
        monkeypatch.setattr("tether.journal._watch.RunsWatch._inbox_news", lambda s, r: None)
    sent: list[str] = []
    gate = anyio.Event()
    tools = gated_tools(sent, gate)
    async with Supervisor(
        tether.FileStore(tmp_path),
        model=lookup_and_send_model(),
        tools=tools,
        sweep_interval=sweeps,
    ) as owner:
        await owner.start("run-1", "go")
        # The owner is inside slow_lookup and holds the journal. Another process answers.
        async with Supervisor(
            FileStore(tmp_path), model=lookup_and_send_model(), tools=tools, resume=False
        ) as other:
            with anyio.fail_after(WAIT):
                while not (await other.inspect("run-1")).model_calls:
                    await anyio.sleep(0.01)
            await other.decide("run-1", "toolu_2", approved=True, by="priya")
        gate.set()
        status = await owner.wait("run-1", timeout=WAIT)
        if deaf and sweeps is not None:  # parked with the decision queued; resumed by a sweep
            assert status is RunStatus.WAITING_FOR_APPROVAL
            with anyio.fail_after(WAIT):
                while status in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.RUNNING):
                    await anyio.sleep(0.05)
                    status = (await owner.inspect("run-1")).status
        assert status is RunStatus.DONE
    assert sent == ["run-1:toolu_2"]
    decisions = of_type(await read_events(tmp_path, "run-1"), Decision)
    assert [(d.call_id, d.by) for d in decisions] == [("toolu_2", "priya")]
    assert not (tmp_path / "runs" / "run-1.inbox").exists()


async def test_a_parked_run_with_answers_in_its_inbox_is_picked_up_by_a_sweep(
    tmp_path: pathlib.Path,
) -> None:
    sent: list[str] = []
    gate = anyio.Event()
    gate.set()
    tools = gated_tools(sent, gate)
    async with Supervisor(
        tether.FileStore(tmp_path), model=lookup_and_send_model(), tools=tools
    ) as sup:
        await sup.start("run-1", "go")
        assert await sup.wait("run-1", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
    # Queued while nobody held the journal (the race where the owner parked right after an
    # answer was queued), plus the same answer twice: the second is ignored.
    async with FileStore(tmp_path) as store:
        for _ in range(2):
            await store.post("run-1", Decision(call_id="toolu_2", approved=True, by="priya"))
    async with Supervisor(
        tether.FileStore(tmp_path), model=lookup_and_send_model(), tools=tools, sweep_interval=0.05
    ) as sup:
        with anyio.fail_after(WAIT):
            while (await sup.inspect("run-1")).status is not RunStatus.DONE:
                await anyio.sleep(0.05)
    assert sent == ["run-1:toolu_2"]
    assert len(of_type(await read_events(tmp_path, "run-1"), Decision)) == 1


def test_a_kill_between_folding_the_inbox_and_clearing_it_records_the_answer_once(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL right after queued answers reach the journal, before the inbox is cleared: the
    next process finds them in both, records nothing twice, and the call runs once."""
    import os
    import signal
    import subprocess
    import sys

    from tether.journal import Decision as Dec

    from . import _inbox_child

    root, ledger = tmp_path / "store", tmp_path / "ledger.txt"
    repo = pathlib.Path(__file__).resolve().parents[2]

    async def park_and_queue() -> None:
        model, tools = _inbox_child.app(ledger)
        async with Supervisor(tether.FileStore(root), model=model, tools=tools) as sup:
            await sup.start("run-1", "go")
            assert await sup.wait("run-1", timeout=WAIT) is RunStatus.WAITING_FOR_APPROVAL
        async with FileStore(root) as store:  # queued as if the journal had been held
            await store.post("run-1", Dec(call_id="toolu_1", approved=True, by="priya"))

    anyio.run(park_and_queue)

    def child(crash_at: str | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
        if crash_at:
            env["TETHER_CRASH_AT"] = crash_at
        return subprocess.run(
            [sys.executable, "-m", "tests.supervisor._inbox_child", str(root), str(ledger)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    killed = child("inbox_folded")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (root / "runs" / "run-1.inbox").exists(), "killed before the inbox was cleared"
    decisions = of_type(anyio.run(read_events, root, "run-1"), Decision)
    assert len(decisions) == 1, "the answer was durable before the kill"
    assert not ledger.exists(), "nothing ran yet"

    resumed = child(None)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "done"
    assert "ignored a queued answer" in resumed.stderr
    events = anyio.run(read_events, root, "run-1")
    assert len(of_type(events, Decision)) == 1
    assert ledger.read_text().splitlines() == ["run-1:toolu_1"]
    assert not (root / "runs" / "run-1.inbox").exists()
