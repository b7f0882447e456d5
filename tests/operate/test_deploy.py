"""Deploys that change the agent: know before (``tether check``), continue after (versions
side by side, a compatible change taken over, a person's ``tether repin``)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import anyio
import httpx2
import pytest

import tether.web
from tether import RunStateError, operate
from tether.journal import FileStore, Parked, Repinned, ToolStarted
from tether.operate._deploy import offers
from tether.supervisor import RunStatus, Supervisor, fold
from tether.supervisor._contracts import contracts_for
from tether.testing import assert_strands_nothing, check_journals

from .._cli import run_tether
from ..web._envs import PRIYA, TOKENS, auth
from . import _deploy_app as app

RUN = "run-deploy"


async def _start(root: pathlib.Path) -> None:
    """A run started on v1, parked for the approval of its lookup: notify is not called yet."""
    v1 = app.v1()
    async with Supervisor(FileStore(root), model=v1.model, tools=v1.tools) as sup:
        await sup.start(RUN, "where is my order?")
        assert await sup.wait(RUN, timeout=10) is RunStatus.WAITING_FOR_APPROVAL


async def _finish(root: pathlib.Path, kind: str) -> tuple[RunStatus, list[Any]]:
    """Approve the lookup, and let a worker of the ``kind`` deploy take the run on."""
    deploy = app.app_for(kind)
    async with FileStore(root) as store:
        await operate.decide(store, RUN, "toolu_l", approved=True, by="priya")
    async with Supervisor(FileStore(root), model=deploy.model, tools=deploy.tools) as sup:
        with anyio.fail_after(10):
            while not (status := (await sup.inspect(RUN)).status).resting:
                await anyio.sleep(0.02)
        events = await FileStore(root).read(RUN)
    return status, events


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    app.SENT.clear()
    anyio.run(_start, tmp_path / "store")
    return tmp_path / "store"


def _check(root: pathlib.Path, kind: str, *more: str) -> Any:
    return run_tether(
        "check", "--root", str(root), "--app", f"tests.operate._deploy_app:{kind}", *more
    )


@pytest.mark.slow
def test_check_predicts_exactly_the_runs_a_deploy_would_stop(root: pathlib.Path) -> None:
    same = _check(root, "v1")
    assert same.returncode == 0, same.stderr
    assert f"{RUN}: continues" in same.stdout
    assert "1 unfinished run(s): 1 can continue, 0 would stop" in same.stdout

    changed = _check(root, "v2")
    assert changed.returncode == 1, changed.stderr
    assert f"{RUN}: would stop" in changed.stdout
    assert "tool 'notify' version '1' changed its contract" in changed.stdout
    assert '+  "description": "Tell the customer, on a channel.",' in changed.stdout
    assert '-  "description": "Tell the customer.",' in changed.stdout
    assert '+    "channel": {' in changed.stdout
    report = json.loads(_check(root, "v2", "--json").stdout)
    assert report["stranded"] == [RUN]
    (change,) = report["runs"][0]["changes"]
    assert change["tool"] == "notify"
    assert "channel" not in change["pinned_schema"]["properties"]
    assert "channel" in change["new_schema"]["properties"]

    compatible = _check(root, "v2c")
    assert compatible.returncode == 0, compatible.stdout
    assert f"{RUN}: continues, taking over a compatible change" in compatible.stdout

    wrongly = _check(root, "v2bad")
    assert wrongly.returncode == 1
    assert "declared compatible, but parameter 'customer' was removed" in wrongly.stdout

    side_by_side = _check(root, "both")
    assert side_by_side.returncode == 0
    assert "no unfinished run needs it" not in side_by_side.stdout  # notify v1 is still needed

    # What check predicted is what the workers do.
    status, events = anyio.run(_finish, root, "v2")
    assert status is RunStatus.NEEDS_ATTENTION
    assert [e.cause for e in events if isinstance(e, Parked)] == ["contract"]
    assert app.SENT == []


def test_a_compatible_change_is_taken_over_and_journaled(root: pathlib.Path) -> None:
    status, events = anyio.run(_finish, root, "v2c")
    assert status is RunStatus.DONE
    (repinned,) = [e for e in events if isinstance(e, Repinned)]
    assert repinned.by == ""
    assert "compatible change of notify v1 taken over" in repinned.note
    assert app.SENT == ["1+channel c-1 email"]  # the new contract's code, with its default
    # check_journals says the same of the recorded journal: nothing is left to strand.
    assert check_journals([root / "runs" / f"{RUN}.journal"], app.v1()).runs == ()


def test_versions_side_by_side_finish_old_runs_on_the_old_one(root: pathlib.Path) -> None:
    status, events = anyio.run(_finish, root, "both")
    assert status is RunStatus.DONE
    assert app.SENT == ["v1 c-1"]
    assert [e.name for e in events if isinstance(e, ToolStarted)] == ["lookup", "notify"]
    (listed,) = json.loads(run_tether("runs", "--root", str(root), "--json").stdout)
    assert (listed["model"], listed["tools"]) == ("scripted", {"lookup": "1", "notify": "1"})
    shown = run_tether("show", "--root", str(root), RUN).stdout
    assert "pinned: model scripted; tools lookup v1, notify v1" in shown
    # Once no unfinished run needs it, check says v1 can go.
    later = _check(root, "both")
    assert "tool notify version 1: no unfinished run needs it any more" in later.stdout


def test_a_person_repins_a_parked_run_and_it_finishes_on_the_new_contract(
    root: pathlib.Path,
) -> None:
    status, _events = anyio.run(_finish, root, "v2")
    assert status is RunStatus.NEEDS_ATTENTION
    repinned = run_tether(
        "repin", "--root", str(root), RUN, "--app", "tests.operate._deploy_app:v2",
        "--by", "priya", "--note", "the channel defaults to email",
    )  # fmt: skip
    assert repinned.returncode == 0, repinned.stderr
    assert repinned.stdout.startswith(f"recorded: repin of run {RUN} to notify v1 (")
    assert "by priya (the channel defaults to email)" in repinned.stdout
    again = run_tether(
        "repin", "--root", str(root), RUN, "--app", "tests.operate._deploy_app:v2", "--by", "priya"
    )  # the run's contracts are the application's now: nothing to give
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"tether: refused: run {RUN!r}: nothing to repin: for every tool the run's pinned "
        "contract is the application's already; nothing was recorded"
    )

    async def resume() -> tuple[RunStatus, list[Any]]:
        deploy = app.v2()
        async with Supervisor(FileStore(root), model=deploy.model, tools=deploy.tools) as sup:
            with anyio.fail_after(10):
                while not (s := (await sup.inspect(RUN)).status).final:
                    await anyio.sleep(0.02)
        return s, await FileStore(root).read(RUN)

    status, events = anyio.run(resume)
    assert status is RunStatus.DONE
    assert app.SENT == ["1+channel c-1 email"]
    (record,) = [e for e in events if isinstance(e, Repinned)]
    assert record.by == "priya"
    assert "channel" in (record.tools[0].input_schema or {})["properties"]


@pytest.mark.parametrize("verb", ["check", "repin"])
def test_an_app_that_is_not_module_colon_factory_is_bad_usage(
    root: pathlib.Path, verb: str
) -> None:
    """Exit 2, as `tether worker --app` gives and the help says (it was 3, as for a store
    that cannot be read)."""
    more = [RUN, "--by", "priya"] if verb == "repin" else []
    done = run_tether(verb, "--root", str(root), *more, "--app", "tests.operate._deploy_app")
    assert done.returncode == 2, done.stderr
    assert "expected MODULE:FACTORY, got 'tests.operate._deploy_app'" in done.stderr


async def test_a_repin_is_refused_under_an_open_call_of_that_tool(root: pathlib.Path) -> None:
    lookup = app.tools_for("v2").get("lookup").pin()
    async with FileStore(root) as store:
        with pytest.raises(RunStateError, match="call 'toolu_l' \\(lookup\\) is not finished"):
            await operate.repin(store, RUN, tools=[lookup], by="priya")


async def test_assert_strands_nothing_fails_a_change_that_would(root: pathlib.Path) -> None:
    async with FileStore(root) as store:
        await assert_strands_nothing(store, app.v1())
        with pytest.raises(AssertionError, match="would stop"):
            await assert_strands_nothing(store, app.v2())


async def test_the_console_offers_a_live_workers_contract_and_a_click_repins(
    root: pathlib.Path,
) -> None:
    """A run parked for its contract, with a worker of the new application live: the inbox
    offers that worker's contract, and accepting it lets that worker finish the run."""
    deploy = app.v2()
    async with FileStore(root) as store:
        await operate.decide(store, RUN, "toolu_l", approved=True, by="priya")
        async with Supervisor(
            store, model=deploy.model, tools=deploy.tools, sweep_interval=0.1
        ) as sup:
            with anyio.fail_after(10):
                while (await sup.inspect(RUN)).status is not RunStatus.NEEDS_ATTENTION:
                    await anyio.sleep(0.02)
            console = tether.web.app(store, tokens=TOKENS)
            transport = httpx2.ASGITransport(app=console)
            async with httpx2.AsyncClient(transport=transport, base_url="http://c.test") as c:
                inbox = (await c.get("/api/inbox", headers=auth(PRIYA))).json()
                (parked,) = inbox["parked"]
                (offer,) = parked["offers"]
                assert offer["worker"] == sup._fleet.key
                assert offer["changes"][0].startswith("notify v1 (")
                assert offer["refused"] is None
                page = (await c.get(f"/runs/{RUN}", headers=auth(PRIYA))).text  # there too
                assert 'data-action="repin"' in page
                assert offer["worker"] in page
                answers: list[httpx2.Response] = []

                async def accept() -> None:
                    answers.append(
                        await c.post(
                            f"/api/runs/{RUN}/repin",
                            json={"worker": offer["worker"], "note": "email is fine"},
                            headers=auth(PRIYA),
                        )
                    )

                async with anyio.create_task_group() as tg:  # three clicks at once
                    for _ in range(3):
                        tg.start_soon(accept)
                (answered,) = [a for a in answers if a.status_code == 200]
                assert "recorded: repin of run" in answered.json()["message"]
                for refused in (a for a in answers if a is not answered):
                    assert refused.status_code == 409, refused.text
                    # (or the live worker has finished the run by then, on a loaded machine)
                    assert any(
                        why in refused.text
                        for why in ("already (repinned by priya)", "run already finished")
                    ), refused.text
                gone = await c.post(
                    f"/api/runs/{RUN}/repin", json={"worker": "nobody"}, headers=auth(PRIYA)
                )
                assert gone.status_code == 409
            with anyio.fail_after(10):
                while not (await sup.inspect(RUN)).status.final:
                    await anyio.sleep(0.02)
            assert (await sup.inspect(RUN)).status is RunStatus.DONE
    assert app.SENT == ["1+channel c-1 email"]
    (record,) = [e for e in await FileStore(root).read(RUN) if isinstance(e, Repinned)]
    assert (record.by, record.note) == ("priya", "email is fine")


async def test_an_offer_a_repin_would_refuse_says_why_instead_of_offering(
    root: pathlib.Path,
) -> None:
    """The run waits for the approval of its lookup; a worker whose lookup changed could go
    on with it, but a repin is refused while that call is open: the inbox says so instead of
    giving a form that is then refused."""
    changed = tether.ToolRegistry()

    @changed.tool(policy="rerun", approval=True)
    async def lookup(order: str, region: str = "eu") -> str:
        """Look an order up, in a region."""
        return order

    app._notify_v1(changed)
    state = fold(await FileStore(root).read(RUN))
    state.parked = Parked(reason="lacks lookup v1", cause="contract")
    (offer,) = offers(state, {"w-new": contracts_for(app.v1().model, changed)})
    assert offer["changes"][0].startswith("lookup v1 (")
    assert "call 'toolu_l' (lookup) is not finished" in offer["refused"]
    async with FileStore(root) as store:  # and a repin says the same
        with pytest.raises(RunStateError, match="call 'toolu_l' \\(lookup\\) is not finished"):
            await operate.repin(store, RUN, tools=[changed.get("lookup").pin()], by="priya")
