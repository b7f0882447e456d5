"""The console's JSON API against real stores (a directory and PostgreSQL): every call, every
refusal (in the command line's words), and answers that a supervisor then carries out."""

from __future__ import annotations

from typing import Any

import pytest

from tether.journal import (
    Decision,
    Manifest,
    ModelResponse,
    Resolved,
    Retried,
    RunFinished,
    RunStarted,
    Signal,
    ToolResult,
    ToolStarted,
    Waiting,
)
from tether.supervisor import RunStatus

from ..cli._stores import APPROVE, CHARGE_CALL, DONE, ESCALATED, FAILED, REFUND_CALL, Env, cli_async
from ._envs import auth, console, store_flags

pytestmark = pytest.mark.timeout(120)


async def test_nothing_without_a_token(env: Env) -> None:
    async with console(env) as client:
        for path in ("/api/runs", "/api/inbox", f"/api/runs/{DONE}", "/api/events"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
        response = await client.get("/api/runs", headers=auth("not-a-token-of-this-console"))
        assert response.status_code == 401
        response = await client.post(
            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve", json={}, headers={}
        )
        assert response.status_code == 401
    assert not [e for e in await env.events(APPROVE) if isinstance(e, Decision)]


async def test_list_counts_filters_searches_and_pages(env: Env) -> None:
    async with console(env) as client:
        body = (await client.get("/api/runs", headers=auth())).json()
        assert body["total"] == 4
        assert body["counts"]["waiting_for_approval"] == 1
        assert body["counts"]["needs_attention"] == 1
        assert body["counts"]["done"] == 1
        assert body["counts"]["failed"] == 1
        runs = {r["run_id"]: r for r in body["runs"]}
        assert runs[APPROVE]["detail"] == f"awaiting approval: {REFUND_CALL} issue_refund"
        assert runs[DONE]["model_calls"] == 2
        assert runs[DONE]["tool_calls"] == 1
        assert runs[DONE]["tokens"] > 0

        only = (await client.get("/api/runs?status=failed", headers=auth())).json()
        assert [r["run_id"] for r in only["runs"]] == [FAILED]
        found = (await client.get("/api/runs?q=escal", headers=auth())).json()
        assert [r["run_id"] for r in found["runs"]] == [ESCALATED]

        seen = []
        for number in (1, 2, 3, 4):
            page = (await client.get(f"/api/runs?per_page=1&page={number}", headers=auth())).json()
            assert (page["pages"], page["page"], len(page["runs"])) == (4, number, 1)
            seen += [r["run_id"] for r in page["runs"]]
        assert sorted(seen) == sorted(runs)

        assert (await client.get("/api/runs?status=nope", headers=auth())).status_code == 400


async def test_show_gives_the_timeline_tether_show_prints(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    async with console(env) as client:
        body = (await client.get(f"/api/runs/{DONE}", headers=auth())).json()
        blob = next(e for e in body["events"] if e["type"] == "tool_result")["blob"]
        content = await client.get(f"/api/runs/{DONE}/blobs/{blob['digest']}", headers=auth())
        missing = await client.get(f"/api/runs/{APPROVE}/blobs/{blob['digest']}", headers=auth())
        assert (await client.get("/api/runs/no-such-run", headers=auth())).status_code == 404
        bad = await client.get("/api/runs/bad%20id", headers=auth())  # as a POST to it is
        assert (bad.status_code, bad.json()["error"]) == (400, "bad_request")
        assert "invalid run id 'bad id'" in bad.json()["message"]
    assert body["summary"]["status"] == "done"
    assert content.json()["content"] == "x" * 300
    assert missing.status_code == 404  # a blob is shown only through a run that refers to it
    code, printed, _ = await cli_async(capsys, "show", *store_flags(env), DONE)
    assert code == 0
    for event in body["events"]:
        assert event["text"][:60] in printed


async def test_inbox_holds_every_call_waiting_for_a_person(env: Env) -> None:
    async with console(env) as client:
        items = (await client.get("/api/inbox", headers=auth())).json()
    calls = {(c["run_id"], c["call_id"]): c for c in items["calls"]}
    assert set(calls) == {(APPROVE, REFUND_CALL), (ESCALATED, CHARGE_CALL)}
    refund = calls[APPROVE, REFUND_CALL]
    assert (refund["awaiting"], refund["tool"], refund["arguments"]) == (
        "approval",
        "issue_refund",
        {"order": "o-1"},
    )
    assert refund["prompt"] == "refund o-1"
    charge = calls[ESCALATED, CHARGE_CALL]
    assert charge["awaiting"] == "resolution"
    assert charge["reason"]


async def test_approve_records_the_signed_in_identity_and_the_run_finishes(env: Env) -> None:
    async with console(env) as client:
        response = await client.post(
            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve",
            json={"note": "fine", "by": "mallory"},  # a name in the body is not who decides
            headers=auth(),
        )
    assert response.status_code == 200, response.text
    assert response.json()["queued"] is False
    assert "recorded: approved toolu_r1 issue_refund" in response.json()["message"]
    (decision,) = [e for e in await env.events(APPROVE) if isinstance(e, Decision)]
    assert (decision.approved, decision.by, decision.note) == (True, "priya", "fine")
    view = await env.resume(APPROVE)
    assert view.status is RunStatus.DONE
    assert env.refunds == ["o-1"]


async def test_refusals_are_the_command_lines(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Each refusal has the status that fits it and says what ``tether`` says."""
    cases = [
        ("approve", DONE, "toolu_l1", {}, 409),
        ("approve", APPROVE, "toolu_nope", {}, 409),
        ("resolve", APPROVE, REFUND_CALL, {"outcome": "retry"}, 409),
        ("approve", ESCALATED, CHARGE_CALL, {}, 409),
        ("retry", DONE, None, {}, 409),
        ("retry", APPROVE, None, {}, 409),
        ("cancel", DONE, None, {}, 409),
        ("signal", FAILED, None, {"name": "payment.o-1"}, 409),
    ]
    async with console(env) as client:
        for verb, run_id, call_id, body, status in cases:
            where = f"/calls/{call_id}" if call_id else ""
            response = await client.post(
                f"/api/runs/{run_id}{where}/{verb}", json=body, headers=auth()
            )
            assert response.status_code == status, (verb, run_id, response.text)
            message = response.json()["message"]
            argv = [verb, *store_flags(env), run_id] + ([call_id] if call_id else [])
            if verb in ("approve", "resolve", "retry"):
                argv += ["--by", "priya"]
            if verb == "resolve":
                argv += ["--outcome", body["outcome"]]
            if verb == "signal":
                argv.insert(len(store_flags(env)) + 2, body["name"])
            code, _, err = await cli_async(capsys, *argv)
            assert code == 1
            assert err.strip() == f"tether: {message}", verb

        bad: list[tuple[str, dict[str, Any], int]] = [
            (f"/api/runs/{ESCALATED}/calls/{CHARGE_CALL}/resolve", {"outcome": "maybe"}, 400),
            (
                f"/api/runs/{ESCALATED}/calls/{CHARGE_CALL}/resolve",
                {"outcome": "retry", "result": 1},
                400,
            ),
            (f"/api/runs/{APPROVE}/signal", {"name": "no spaces allowed"}, 400),
            (f"/api/runs/{FAILED}/retry", {"extend": {"max_nothing": 1}}, 400),
            (f"/api/runs/{FAILED}/retry", {"extend": {"max_model_calls": "ten"}}, 400),
            (f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve", {"note": 3}, 400),
            ("/api/runs/no-such-run/cancel", {}, 404),
            ("/api/runs/bad%20id/cancel", {}, 400),
        ]
        for path, body, status in bad:
            response = await client.post(path, json=body, headers=auth())
            assert response.status_code == status, (path, response.text)
        response = await client.post(
            f"/api/runs/{APPROVE}/cancel",
            content=b"[1]",
            headers={**auth(), "content-type": "application/json"},
        )
        assert response.status_code == 400
        response = await client.post(
            f"/api/runs/{APPROVE}/cancel",
            content=b"{}",
            headers={**auth(), "content-type": "text/plain"},
        )
        assert response.status_code == 415
    # nothing was recorded by any of them
    assert not [e for e in await env.events(APPROVE) if isinstance(e, (Decision, RunFinished))]


async def test_resolve_retry_signal_and_cancel(env: Env) -> None:
    async with console(env) as client:
        resolved = await client.post(
            f"/api/runs/{ESCALATED}/calls/{CHARGE_CALL}/resolve",
            json={
                "outcome": "succeeded",
                "result": "charged c-1 (seen in the PSP)",
                "note": "checked",
            },
            headers=auth(),
        )
        retried = await client.post(
            f"/api/runs/{FAILED}/retry",
            json={"note": "one more", "extend": {"max_model_calls": 5}},
            headers=auth("sam-token-0123456789abcdef00"),
        )
        signalled = await client.post(
            f"/api/runs/{APPROVE}/signal",
            json={"name": "payment.o-1", "data": {"amount": 40}, "id": "evt_1"},
            headers=auth(),
        )
        again = await client.post(
            f"/api/runs/{APPROVE}/signal",
            json={"name": "payment.o-1", "id": "evt_1"},
            headers=auth(),
        )
        cancelled = await client.post(
            f"/api/runs/{APPROVE}/cancel", json={"reason": "customer withdrew"}, headers=auth()
        )
    for response in (resolved, retried, signalled, again, cancelled):
        assert response.status_code == 200, response.text
    assert (again.json()["recorded"], again.json()["repeated"]) == (False, True)
    assert (signalled.json()["recorded"], signalled.json()["repeated"]) == (True, False)
    assert again.json()["message"] == (  # (delivered again without its data)
        f"already recorded: signal payment.o-1 (evt_1) to run {APPROVE}; "
        "delivered again, it counts once (its payload differs from the recorded one, "
        '{"amount":40}, which stands)'
    )
    # A retry says what the run had stopped with and its budgets now, as `tether retry` does.
    assert "; it had stopped with: failed: model call budget exhausted" in retried.json()["message"]
    assert '; budgets from now on: {"max_model_calls":6' in retried.json()["message"]
    (resolution,) = [e for e in await env.events(ESCALATED) if isinstance(e, Resolved)]
    assert (resolution.outcome, resolution.by, resolution.result) == (
        "succeeded",
        "priya",
        "charged c-1 (seen in the PSP)",
    )
    (retry,) = [e for e in await env.events(FAILED) if isinstance(e, Retried)]
    assert retry.by == "sam"
    assert retry.budgets is not None
    assert retry.budgets.max_model_calls == 6
    events = await env.events(APPROVE)
    assert [(s.signal_id, s.by, s.payload) for s in events if isinstance(s, Signal)] == [
        ("evt_1", "priya", {"amount": 40}),
    ]
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert (end.status, end.reason) == ("cancelled", "customer withdrew (by priya)")
    view = await env.resume(ESCALATED)
    assert view.status is RunStatus.DONE
    assert env.charges == []  # it happened already: resolved, not run again


async def test_an_answer_for_a_held_run_goes_to_its_inbox_and_the_holder_records_it(
    env: Env,
) -> None:
    async with console(env) as client, env.store() as other, await other.open(APPROVE) as journal:
        # another process advances the run: it shows as running, held by it
        listed = (await client.get("/api/runs", headers=auth())).json()["runs"]
        (held,) = [r for r in listed if r["run_id"] == APPROVE]
        assert held["status"] == "running"
        assert held["held_by"] is not None
        response = await client.post(
            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/reject",
            json={"note": "refunds need a manager"},
            headers=auth(),
        )
        assert response.status_code == 200, response.text
        assert response.json()["queued"] is True
        assert await other.has_inbox(APPROVE)
        assert not [e for e in journal.events if isinstance(e, Decision)]
    view = await env.resume(APPROVE)
    assert view.status is RunStatus.DONE
    assert env.refunds == []
    decisions = [e for e in await env.events(APPROVE) if isinstance(e, Decision)]
    assert [(d.approved, d.by, d.note) for d in decisions] == [
        (False, "priya", "refunds need a manager")
    ]


async def test_the_openapi_description_covers_every_route_and_answer(env: Env) -> None:
    """Each route under /api is described with its method, and what the API answers has the
    properties its schema requires."""
    use = {"type": "tool_use", "id": "c1", "name": "wait_paid", "input": {}}
    await env.craft(
        "run-rests",
        [
            RunStarted(
                run_id="run-rests",
                manifest=Manifest(model="scripted"),
                messages=[{"role": "user", "content": "wait"}],
            ),
            ModelResponse(message={"role": "assistant", "content": [use]}),
            ToolStarted(call_id="c1", name="wait_paid"),
            Waiting(call_id="c1", attempt=1, event="payment.x"),
        ],
    )
    async with console(env) as client:
        doc = (await client.get("/api/openapi.json")).json()  # public: no token needed
        application = client._transport.app  # type: ignore[attr-defined]
        routes = {
            (route.path, method.lower())
            for route in application.routes
            if route.path.startswith("/api/") and route.path != "/api/openapi.json"
            for method in set(route.methods or ()) - {"HEAD"}
        }
        described = {(path, method) for path, ops in doc["paths"].items() for method in ops}
        assert routes == described
        schemas = doc["components"]["schemas"]
        runs = (await client.get("/api/runs", headers=auth())).json()
        inbox = (await client.get("/api/inbox", headers=auth())).json()
        shown = (await client.get(f"/api/runs/{APPROVE}", headers=auth())).json()
        approved = await client.post(
            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve", json={}, headers=auth()
        )
        refused = await client.post(
            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve", json={}, headers=auth()
        )
    for kind, rows in (
        ("Run", [*runs["runs"], shown["summary"]]),
        ("InboxCall", [*inbox["calls"], *shown["waiting"]]),
        ("Question", [w for row in runs["runs"] for w in row["waiting"] if "since" in w]),
        ("Rest", [w for row in runs["runs"] for w in row["waiting"] if "what" in w]),
    ):
        assert rows, kind
        for row in rows:
            assert set(row) == set(schemas[kind]["properties"]) == set(schemas[kind]["required"])
    assert set(schemas["Recorded"]["required"]) <= set(approved.json())
    assert set(schemas["Error"]["required"]) <= set(refused.json())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"], (path, method)
            assert "200" in op["responses"], (path, method)


async def test_an_answer_to_a_run_whose_records_make_no_run_is_unreadable(env: Env) -> None:
    """Every frame checks, but a result answers a call the run never made: the same refusal
    as the command line's, as for a journal that cannot be read (500 unreadable), not 400."""
    await env.craft(
        "run-x",
        [
            RunStarted(run_id="run-x", manifest=Manifest(model="scripted"), messages=[]),
            ToolResult(call_id="toolu_01", content="x", ok=True),
        ],
    )
    async with console(env) as client:
        response = await client.post("/api/runs/run-x/cancel", json={}, headers=auth())
    assert response.status_code == 500
    assert response.json() == {
        "error": "unreadable",
        "message": "run 'run-x': its journal's records do not make a run (record 1: refers to "
        "tool call 'toolu_01', which the run never made); nothing was recorded "
        "(`tether journal dump` shows them)",
    }


async def test_a_retry_extended_by_part_of_a_call_is_bad_request(env: Env) -> None:
    async with console(env) as client:
        for extend, words in (
            ({"max_model_calls": 2.5}, "extend: max_model_calls counts whole calls or tokens"),
            ({"max_model_calls": "2"}, "extend maps budget names to numbers"),
        ):
            response = await client.post(
                f"/api/runs/{FAILED}/retry", json={"extend": extend}, headers=auth()
            )
            assert response.status_code == 400, response.text
            assert words in response.text
        fine = await client.post(
            f"/api/runs/{FAILED}/retry", json={"extend": {"max_model_calls": 2.0}}, headers=auth()
        )
        assert fine.status_code == 200, fine.text
    (retry,) = [e for e in await env.events(FAILED) if isinstance(e, Retried)]
    assert retry.budgets is not None
    assert retry.budgets.max_model_calls == 3  # (1, the run's, and 2 more)
