"""The console's pages against real stores (a directory and PostgreSQL): what each shows, and
every form, each answer recorded with the signed-in identity or refused in the command line's
words."""

from __future__ import annotations

import html
import re

import pytest
from markupsafe import escape

from tether.journal import (
    Decision,
    Manifest,
    ModelResponse,
    Parked,
    Resolved,
    Retried,
    RunFinished,
    RunStarted,
    Signal,
    ToolStarted,
    Waiting,
)

from ..cli._stores import APPROVE, CHARGE_CALL, DONE, ESCALATED, FAILED, REFUND_CALL, Env
from ._envs import auth, console, sign_in

pytestmark = pytest.mark.timeout(120)


def rows(page: str) -> list[str]:
    """The run ids of a runs page's table, in order."""
    body = page.split('<table class="runs">', 1)[1].split("</table>", 1)[0]
    return [part.split('"', 1)[0] for part in body.split('<tr data-run="')[1:]]


async def test_the_runs_page_a_runs_page_and_the_inbox(env: Env) -> None:
    async with console(env) as client:
        await sign_in(client)
        api = {
            r["run_id"]: r for r in (await client.get("/api/runs", headers=auth())).json()["runs"]
        }
        runs = (await client.get("/")).text
        failed = (await client.get("/?status=failed")).text
        found = (await client.get("/?q=escal")).text
        shown = (await client.get(f"/api/runs/{DONE}", headers=auth())).json()
        done = (await client.get(f"/runs/{DONE}")).text
        approve = (await client.get(f"/runs/{APPROVE}")).text
        inbox = (await client.get("/inbox")).text
        (blob,) = [e["blob"] for e in shown["events"] if e.get("blob")]
        blob_page = (await client.get(f"/runs/{DONE}/blobs/{blob['digest']}")).text
        missing = await client.get("/runs/no-such-run")
    assert sorted(rows(runs)) == sorted(api)
    for run in api.values():  # status, counters, tokens, what it waits for or why it stopped
        row = runs.split(f'<tr data-run="{run["run_id"]}">', 1)[1].split("</tr>", 1)[0]
        for value in (run["status"], run["age"], run["model_calls"], run["tokens"]):
            assert f">{value}<" in row.replace(f"s-{run['status']}", ""), (run["run_id"], value)
        assert str(escape(run["detail"])) in row
    assert api[FAILED]["detail"]  # the reason it failed
    assert f"awaiting approval: {REFUND_CALL} issue_refund" in api[APPROVE]["detail"]
    assert "waiting_for_approval <b>1</b>" in runs
    assert "failed <b>1</b>" in runs
    assert rows(failed) == [FAILED]
    assert rows(found) == [ESCALATED]

    for event in shown["events"]:  # the timeline tether show prints, records folded
        assert str(escape(event["text"])) in done
    assert '<details data-key="event ' in done
    assert f'href="/runs/{DONE}/blobs/{blob["digest"]}"' in done
    assert "x" * 300 in blob_page
    assert missing.status_code == 404

    assert f'action="/runs/{APPROVE}/calls/{REFUND_CALL}/approve"' in approve
    for run_id, call_id, verbs in (
        (APPROVE, REFUND_CALL, ("approve", "reject")),
        (ESCALATED, CHARGE_CALL, ("resolve",)),
    ):
        section = inbox.split(f'data-run="{run_id}" data-call="{call_id}"', 1)[1]
        section = section.split("</section>", 1)[0]
        for verb in verbs:
            assert f'action="/runs/{run_id}/calls/{call_id}/{verb}"' in section or (
                f'formaction="/runs/{run_id}/calls/{call_id}/{verb}"' in section
            )
        assert f'action="/runs/{run_id}/cancel"' in section
    refund = inbox.split(f'data-call="{REFUND_CALL}"', 1)[1].split("</section>", 1)[0]
    assert "issue_refund" in refund
    assert str(escape('"order": "o-1"')) in refund
    assert "refund o-1" in refund  # the run's prompt


async def test_pages_are_paginated(env: Env) -> None:
    async with console(env, per_page=1) as client:
        await sign_in(client)
        pages = [(await client.get(f"/?page={n}")).text for n in (1, 2, 3, 4)]
    assert "page 1 of 4" in pages[0]
    assert 'rel="next"' in pages[0]
    assert 'rel="prev"' not in pages[0]
    assert 'rel="prev"' in pages[3]
    assert 'rel="next"' not in pages[3]
    assert len({run for page in pages for run in rows(page)}) == 4


def sections(page: str) -> list[str]:
    """What each section of an inbox page is about: ``run_id call_id`` (or the run id alone,
    for a parked run), in order."""
    found = re.findall(
        r'<section class="waiting" data-run="([^"]+)"(?: data-call="([^"]+)")?', page
    )
    return [f"{run} {call}".strip() for run, call in found]


async def test_the_inbox_is_paginated_and_its_pages_hold_every_item_once(env: Env) -> None:
    use = {"type": "tool_use", "id": "c1", "name": "wait_paid", "input": {}}
    for n in (1, 2):  # two calls waiting for an event
        run_id = f"run-event-{n}"
        await env.craft(
            run_id,
            [
                RunStarted(run_id=run_id, manifest=Manifest(model="scripted"), messages=[]),
                ModelResponse(message={"role": "assistant", "content": [use]}),
                ToolStarted(call_id="c1", name="wait_paid"),
                Waiting(call_id="c1", attempt=1, event=f"payment.o-{n}", until=4e9),
            ],
        )
    await env.craft(  # a run the runtime parked
        "run-parked",
        [
            RunStarted(run_id="run-parked", manifest=Manifest(model="scripted"), messages=[]),
            Parked(reason="the model refused the request: no key", cause="model"),
        ],
    )
    async with console(env, per_page=2) as client:
        await sign_in(client)
        everything = (await client.get("/api/inbox", headers=auth())).json()
        pages = [(await client.get(f"/inbox?page={n}")).text for n in (1, 2, 3)]
        past_the_end = (await client.get("/inbox?page=9")).text
        not_a_number = (await client.get("/inbox?page=x")).text
    want = [
        *(f"{c['run_id']} {c['call_id']}" for c in everything["calls"]),
        *(p["run_id"] for p in everything["parked"]),
        *(f"{e['run_id']} {e['call_id']}" for e in everything["events"]),
    ]
    assert len(want) == 5  # two calls for a person, one parked run, two calls for an event
    assert [sections(page) for page in pages] == [want[0:2], want[2:4], want[4:5]]
    for number, page in enumerate(pages, 1):  # each page counts every item, and says where
        assert "2 call(s) waiting for a person · 1 run(s) parked · 2 call(s) waiting" in page
        assert f"page {number} of 3" in page
        assert ('href="/inbox?page=2" rel="next"' in page) == (number == 1)
        assert ('href="/inbox?page=2" rel="prev"' in page) == (number == 3)
    assert sections(past_the_end) == want[4:5]
    assert sections(not_a_number) == want[0:2]


async def test_every_form_records_its_answer_or_says_why_not(env: Env) -> None:
    async with console(env) as client:
        csrf = await sign_in(client)

        async def post(path: str, **fields: str) -> str:
            response = await client.post(path, data={"csrf": csrf, "next": "/inbox", **fields})
            assert response.status_code == 303, response.text
            location = response.headers["location"]
            assert location.startswith("/inbox?flash=")
            page = (await client.get(location)).text
            return html.unescape(page.split('<p class="flash', 1)[1].split("</p>", 1)[0])

        refused = await post(f"/runs/{DONE}/calls/toolu_l1/approve")
        resolved = await post(
            f"/runs/{ESCALATED}/calls/{CHARGE_CALL}/resolve",
            outcome="succeeded",
            result='"charged c-1"',
            note="seen in the PSP",
        )
        rejected = await post(
            f"/runs/{APPROVE}/calls/{REFUND_CALL}/reject", note="refunds need a manager"
        )
        retried = await post(f"/runs/{FAILED}/retry", extend="max_model_calls=5")
        signalled = await post(f"/runs/{APPROVE}/signal", name="payment.o-1", data='{"a": 1}')
        cancelled = await post(f"/runs/{APPROVE}/cancel", reason="customer withdrew")
        bad_json = await post(
            f"/runs/{ESCALATED}/calls/{CHARGE_CALL}/resolve", outcome="failed", result="{nope"
        )
    assert refused.startswith(' error" role="status">refused: run ')
    assert "recorded: resolved toolu_c1" in resolved
    assert "by priya (seen in the PSP)" in resolved  # the note, as `tether resolve` says it
    assert "recorded: rejected toolu_r1" in rejected
    assert "recorded: retry of run" in retried
    assert "recorded: signal payment.o-1" in signalled
    assert "recorded: run run-approve cancelled: customer withdrew (by priya) (seq" in cancelled
    assert "result is not valid JSON" in bad_json
    (resolution,) = [e for e in await env.events(ESCALATED) if isinstance(e, Resolved)]
    assert (resolution.outcome, resolution.result, resolution.by) == (
        "succeeded",
        "charged c-1",
        "priya",
    )
    (retry,) = [e for e in await env.events(FAILED) if isinstance(e, Retried)]
    assert retry.by == "priya"
    assert retry.budgets is not None
    assert retry.budgets.max_model_calls == 6
    events = await env.events(APPROVE)
    (decision,) = [e for e in events if isinstance(e, Decision)]
    assert (decision.approved, decision.by, decision.note) == (
        False,
        "priya",
        "refunds need a manager",
    )
    assert [(s.name, s.payload) for s in events if isinstance(s, Signal)] == [
        ("payment.o-1", {"a": 1})
    ]
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert (end.status, end.reason) == ("cancelled", "customer withdrew (by priya)")


async def test_the_runs_page_lists_each_child_run_under_its_parent(file_env: Env) -> None:
    for run_id, parent in (("run-lead", None), ("run-zzz", None), ("run-lead.c1", "run-lead")):
        await file_env.craft(
            run_id,
            [
                RunStarted(
                    run_id=run_id,
                    manifest=Manifest(model="scripted"),
                    messages=[{"role": "user", "content": "go"}],
                    parent=parent,
                    parent_call="c1" if parent else None,
                )
            ],
        )
    async with console(file_env) as client:
        await sign_in(client)
        page = (await client.get("/?per_page=50")).text
    rows = re.findall(r'<tr data-run="([^"]+)"( class="[^"]*")?>', page)
    order = [run for run, _ in rows]
    assert order.index("run-lead.c1") == order.index("run-lead") + 1
    assert dict(rows)["run-lead.c1"] == ' class="child depth-1"'
    assert dict(rows)["run-lead"] == ""


async def test_each_answer_s_message_is_shown_on_its_own_page(env: Env) -> None:
    """Two tabs of one session answer at once: each redirect shows its own answer's message
    and no other (the first page to load showed every message, the second none)."""
    async with console(env) as client:
        csrf = await sign_in(client)
        approve = await client.post(
            f"/runs/{APPROVE}/calls/{REFUND_CALL}/approve", data={"csrf": csrf, "next": "/inbox"}
        )
        refused = await client.post(
            f"/runs/{DONE}/calls/toolu_l1/approve", data={"csrf": csrf, "next": "/inbox"}
        )
        second = (await client.get(refused.headers["location"])).text
        first = (await client.get(approve.headers["location"])).text
        plain = (await client.get("/inbox")).text
    assert "recorded: approved" in first
    assert "refused" not in first.split("<main", 1)[1].split("</p>", 1)[0]
    assert 'class="flash error"' in second
    assert "recorded: approved" not in second
    assert 'class="flash' not in plain
    assert "flash=" not in first.split('name="next"', 1)[1].split(">", 1)[0]  # not passed on


def test_the_message_key_goes_in_the_query_before_any_fragment() -> None:
    from tether.web._console import with_flash

    assert with_flash("/runs/x#calls", "K") == "/runs/x?flash=K#calls"
    assert with_flash("/?status=done&flash=old", "K") == "/?status=done&flash=K"
    assert with_flash("/inbox?q=", "K") == "/inbox?q=&flash=K"
