"""The inbox of a run that a running worker holds: a turn asks for a refund (which needs
approval) and a slow look-up at once. While the worker runs the look-up it holds the run, yet
the inbox lists the refund; the approval given there is queued, and that worker records it and
finishes the run."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import tether
from tether.journal import Decision
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor

from ..cli._stores import WAIT, Env, cli_async
from ._envs import auth, console, store_flags

pytestmark = pytest.mark.timeout(120)

use = tether.ScriptedModel.tool_use
RUN = "run-held"
REFUND = "toolu_h1"
SLOW = "toolu_h2"


def _refund_after_a_look(
    env: Env, looking: anyio.Event, release: anyio.Event
) -> tuple[tether.ScriptedModel, tether.ToolRegistry]:
    """A turn that asks for a refund (approval needed) and a look-up that waits for
    ``release`` (``looking`` is set once it runs) at once, then the answer."""

    def answer(messages: list[Message]) -> Any:
        if sum(1 for m in messages if m.get("role") == "assistant") == 0:
            return [use(REFUND, "issue_refund", {"order": "o-9"}), use(SLOW, "slow_lookup", {})]
        return "refund o-9 issued"

    tools = env.tools()

    @tools.tool(policy="rerun")
    async def slow_lookup() -> str:
        """Look something up, slowly."""
        looking.set()
        await release.wait()
        return "found"

    return tether.ScriptedModel(answer), tools


async def test_a_call_of_a_run_a_worker_holds_is_in_the_inbox_and_its_approval_is_queued(
    env: Env,
) -> None:
    looking, release = anyio.Event(), anyio.Event()
    model, tools = _refund_after_a_look(env, looking, release)

    async with Supervisor(env.store(), model=model, tools=tools) as sup:
        await sup.start(RUN, "refund o-9 after a look")
        with anyio.fail_after(WAIT):
            await looking.wait()
        async with console(env) as client:
            listed = (await client.get("/api/runs", headers=auth())).json()["runs"]
            (run,) = [r for r in listed if r["run_id"] == RUN]
            assert run["status"] == "running"
            assert run["held_by"] is not None
            assert f"awaiting approval: {REFUND} issue_refund" in run["detail"]
            calls = (await client.get("/api/inbox", headers=auth())).json()["calls"]
            (call,) = [c for c in calls if c["run_id"] == RUN]
            assert (call["call_id"], call["tool"], call["awaiting"], call["arguments"]) == (
                REFUND,
                "issue_refund",
                "approval",
                {"order": "o-9"},
            )
            assert call["prompt"] == "refund o-9 after a look"
            page = await client.get(f"/api/runs/{RUN}", headers=auth())
            assert [w["call_id"] for w in page.json()["waiting"]] == [REFUND]
            response = await client.post(
                f"/api/runs/{RUN}/calls/{REFUND}/approve", json={"note": "ok"}, headers=auth()
            )
            assert response.status_code == 200, response.text
            assert response.json()["queued"] is True
        assert env.refunds == []
        release.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert env.refunds == ["o-9"]
    decisions = [e for e in await env.events(RUN) if isinstance(e, Decision)]
    assert [(d.call_id, d.approved, d.by, d.note) for d in decisions] == [
        (REFUND, True, "priya", "ok")
    ]


async def test_an_answer_queued_by_another_process_is_shown_queued_not_offered_again(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approval given through ``tether approve`` while a worker holds the run waits in the
    run's inbox: the console (which listed the run before), ``tether show`` and ``tether runs``
    then show it as queued, and no longer offer the call for approval."""
    looking, release = anyio.Event(), anyio.Event()
    model, tools = _refund_after_a_look(env, looking, release)

    queued = f'queued in its inbox: approved {REFUND} issue_refund(order="o-9") of run {RUN}'
    async with Supervisor(env.store(), model=model, tools=tools) as sup:
        await sup.start(RUN, "refund o-9 after a look")
        with anyio.fail_after(WAIT):
            await looking.wait()
        async with console(env) as client:
            calls = (await client.get("/api/inbox", headers=auth())).json()["calls"]
            assert [c["call_id"] for c in calls if c["run_id"] == RUN] == [REFUND]
            code, out, err = await cli_async(
                capsys, "approve", *store_flags(env), RUN, REFUND, "--by", "sam"
            )
            assert code == 0, err
            assert "queued: another process is advancing the run" in out
            with anyio.fail_after(WAIT):  # once the console's last look (a quarter second) ends
                while any(
                    c["run_id"] == RUN
                    for c in (await client.get("/api/inbox", headers=auth())).json()["calls"]
                ):
                    await anyio.sleep(0.05)
            listed = (await client.get("/api/runs", headers=auth())).json()["runs"]
            (run,) = [r for r in listed if r["run_id"] == RUN]
            assert run["status"] == "running"
            assert "awaiting approval" not in run["detail"]
            assert queued in run["detail"]
            assert run["queued"] == [queued.removeprefix("queued in its inbox: ") + " by sam"]
            page = (await client.get(f"/api/runs/{RUN}", headers=auth())).json()
            assert page["waiting"] == []
            html = (await client.get(f"/runs/{RUN}", headers=auth())).text
            assert "queued in the run's inbox" in html
            assert f'action="/runs/{RUN}/calls/{REFUND}/approve"' not in html
        code, out, _ = await cli_async(capsys, "show", *store_flags(env), RUN)
        assert code == 0
        assert "awaiting approval" not in out
        assert "queued in its inbox (not in its journal yet): approved" in out
        code, out, _ = await cli_async(capsys, "runs", *store_flags(env))
        (line,) = [line for line in out.splitlines() if line.startswith(RUN)]
        assert queued in line
        assert "awaiting approval" not in line
        release.set()
        assert await sup.wait(RUN, timeout=WAIT) is RunStatus.DONE
    assert env.refunds == ["o-9"]
    async with console(env) as client:
        listed = (await client.get("/api/runs", headers=auth())).json()["runs"]
        (run,) = [r for r in listed if r["run_id"] == RUN]
        assert (run["status"], run["queued"]) == ("done", [])
