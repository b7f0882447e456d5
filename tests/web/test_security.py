"""The console's defences: sign-in, CSRF, cross-site posts, escaping, redaction, headers,
redirects, and a console without sign-in that answers only loopback names."""

from __future__ import annotations

import pathlib

import pytest

import tether.web
from tether.cli import main
from tether.journal import (
    Decision,
    Event,
    Manifest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolResult,
    ToolStarted,
)
from tether.web._guard import Guard

from ..cli._stores import APPROVE, DONE, REFUND_CALL, Env
from ._envs import PRIYA, SAM, auth, console, sign_in

APPROVE_FORM = f"/runs/{APPROVE}/calls/{REFUND_CALL}/approve"


async def decisions(env: Env) -> list[Decision]:
    return [e for e in await env.events(APPROVE) if isinstance(e, Decision)]


async def test_pages_send_a_stranger_to_sign_in(file_env: Env) -> None:
    async with console(file_env) as client:
        for path in ("/", "/inbox", f"/runs/{DONE}"):
            response = await client.get(path)
            assert response.status_code == 303
            assert response.headers["location"].startswith("/login?next=")
        refused = await client.post("/login", data={"token": "guess-guess-guess-guess"})
        assert refused.status_code == 401
        assert "tether_console" not in refused.headers.get("set-cookie", "")
        posted = await client.post(APPROVE_FORM, data={"note": "x"})
        assert posted.status_code == 303
        assert "/login" in posted.headers["location"]
    assert await decisions(file_env) == []


async def test_a_form_post_needs_the_sessions_csrf_token_and_this_origin(file_env: Env) -> None:
    async with console(file_env) as client:
        csrf = await sign_in(client, SAM)
        attempts = [
            ({}, {"note": "no token"}),
            ({}, {"note": "wrong token", "csrf": "x" * 43}),
            ({"origin": "http://evil.example"}, {"csrf": csrf}),
            ({"referer": "http://evil.example/page"}, {"csrf": csrf}),
            ({"sec-fetch-site": "cross-site"}, {"csrf": csrf}),
            ({"sec-fetch-site": "same-site"}, {"csrf": csrf}),
            ({"origin": "null"}, {"csrf": csrf}),
        ]
        for headers, form in attempts:
            response = await client.post(APPROVE_FORM, data=form, headers=headers)
            assert response.status_code == 403, (headers, form)
        assert await decisions(file_env) == []
        # the API over the same session needs the token in a header
        api = f"/api{APPROVE_FORM}"
        assert (await client.post(api, json={})).status_code == 403
        ok = await client.post(
            APPROVE_FORM,
            data={"csrf": csrf, "note": "ok", "by": "mallory", "next": "//evil.example/x"},
            headers={"origin": "http://console.test", "sec-fetch-site": "same-origin"},
        )
        assert ok.status_code == 303
        location = ok.headers["location"]
        assert location.startswith("/?flash=")  # never off to another site
        page = await client.get(location)
        assert "recorded: approved toolu_r1" in page.text
    (decision,) = await decisions(file_env)
    assert (decision.by, decision.note) == ("sam", "ok")


async def test_sign_out_ends_the_session(file_env: Env) -> None:
    async with console(file_env) as client:
        csrf = await sign_in(client)
        assert (await client.post("/logout", data={})).status_code == 403
        assert (await client.post("/logout", data={"csrf": csrf})).status_code == 303
        client.cookies.clear()
        assert (await client.get("/")).status_code == 303


async def test_every_response_carries_the_security_headers(file_env: Env) -> None:
    async with console(file_env) as client:
        await sign_in(client)
        for path in ("/", "/inbox", f"/runs/{DONE}", "/api/runs"):
            response = await client.get(path)
            assert response.status_code == 200, path
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["cache-control"] == "no-store"
        page = (await client.get("/")).text
        assert "<script>" not in page
        assert " on" not in page.split("<body", 1)[1].split(">")[0]
        static = await client.get("/static/console.js")
        assert static.status_code == 200
        assert "no-store" not in static.headers["cache-control"]


XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


async def xss_run(env: Env) -> None:
    await run_saying(env, "run-xss", XSS)


async def run_saying(env: Env, run_id: str, text: str, *, finished: bool = True) -> None:
    """A run whose prompt, call arguments, result and answer all say ``text`` (only its
    prompt and the call it waits on, when not ``finished``)."""
    use = {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": text}}
    start = RunStarted(
        run_id=run_id,
        manifest=Manifest(model="scripted"),
        messages=[{"role": "user", "content": text}],
    )
    events: list[Event] = [start, ModelResponse(message={"role": "assistant", "content": [use]})]
    if finished:
        events += [
            ToolStarted(call_id="c1", name="lookup"),
            ToolResult(call_id="c1", ok=True, content=text),
            ModelResponse(message={"role": "assistant", "content": text}),
            RunFinished(status="done"),
        ]
    await env.craft(run_id, events)


async def test_model_and_tool_text_is_escaped(file_env: Env) -> None:
    await xss_run(file_env)
    async with console(file_env) as client:
        await sign_in(client)
        pages = [await client.get(p) for p in ("/runs/run-xss", "/", "/?q=" + XSS)]
    for page in pages:
        assert page.status_code == 200
        assert "<script>window" not in page.text
        assert "<img src=x" not in page.text
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in pages[0].text


async def test_bidirectional_controls_are_written_out_on_every_page(file_env: Env) -> None:
    """A right-to-left override in a model's arguments would show them to their approver in
    another order than the tool gets them: the pages write it out (the API keeps the data)."""
    await run_saying(
        file_env, "run-bidi", "refund \u202e001$ to\u202c o-1 \u2066x\u2069", finished=False
    )
    async with console(file_env) as client:
        await sign_in(client)
        pages = [await client.get(p) for p in ("/runs/run-bidi", "/", "/inbox")]
        data = await client.get("/api/runs/run-bidi", headers=auth())
    for page in pages:
        assert page.status_code == 200
        for control in "\u202e\u202c\u2066\u2069":
            assert control not in page.text, page.url
    assert "refund \\u202e001$ to\\u202c o-1" in pages[0].text
    assert "\u202e" in data.text or "\\u202e" in data.text  # the journal's own words


SECRET = "sk-ant-api03-" + "Q" * 40


async def test_nothing_redacted_is_shown(file_env: Env) -> None:
    """A key that a model or a tool put in a run is not on any page, API answer or blob: the
    journal holds it redacted (its store redacts before writing), and the console reads only
    the journal."""
    big = f"the key is {SECRET} " + "x" * 300  # over the blob threshold: kept as a blob
    use = {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": f"use {SECRET}"}}
    await file_env.craft(
        "run-secret",
        [
            RunStarted(
                run_id="run-secret",
                manifest=Manifest(model="scripted"),
                messages=[{"role": "user", "content": f"my key: {SECRET}"}],
            ),
            ModelResponse(message={"role": "assistant", "content": [use]}),
            ToolStarted(call_id="c1", name="lookup"),
            ToolResult(call_id="c1", ok=True, content=big),
            ModelResponse(message={"role": "assistant", "content": f"done with {SECRET}"}),
            RunFinished(status="done"),
        ],
    )
    async with console(file_env) as client:
        await sign_in(client)
        shown = await client.get("/api/runs/run-secret", headers=auth())
        (blob,) = [e["blob"] for e in shown.json()["events"] if e.get("blob")]
        answers = [
            shown,
            await client.get("/runs/run-secret"),
            await client.get(f"/runs/run-secret/blobs/{blob['digest']}"),
            await client.get(f"/api/runs/run-secret/blobs/{blob['digest']}", headers=auth()),
            await client.get("/api/runs", headers=auth()),
            await client.get("/?q=run-secret"),
        ]
    for answer in answers:
        assert answer.status_code == 200
        assert "sk-ant-api03" not in answer.text
    for answer in answers[:4]:
        assert "[REDACTED]" in answer.text


async def test_an_open_console_still_checks_csrf_and_records_its_identity(file_env: Env) -> None:
    loopback = "http://127.0.0.1:8765"
    async with console(file_env, tokens=None, anonymous="ops", base_url=loopback) as client:
        page = await client.get("/inbox")  # no sign-in: a session opens with the page
        assert page.status_code == 200
        for host in ("localhost:8765", "[::1]:8765", "127.0.0.1"):
            assert (await client.get("/api/inbox", headers={"host": host})).status_code == 200
        # Another site whose name points at 127.0.0.1 (DNS rebinding) reaches nothing.
        for host in ("rebind.example:8765", "console.test", "127.0.0.1.example", ""):
            refused = await client.get("/inbox", headers={"host": host})
            assert refused.status_code == 403, host
            assert "answers only requests addressed to localhost" in refused.text
        form = await client.post(
            APPROVE_FORM,
            data={"note": "x"},
            headers={"host": "rebind.example:8765", "origin": "http://rebind.example:8765"},
        )
        assert form.status_code == 403
        assert not await decisions(file_env)
        assert (await client.post(APPROVE_FORM, data={"note": "x"})).status_code == 403
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        ok = await client.post(APPROVE_FORM, data={"csrf": csrf, "next": "/inbox"})
        assert ok.status_code == 303
        assert ok.headers["location"].startswith("/inbox?flash=")
    (decision,) = await decisions(file_env)
    assert decision.by == "ops"


def test_app_needs_tokens_or_an_anonymous_identity(tmp_path: pathlib.Path) -> None:
    store = tether.FileStore(tmp_path)
    with pytest.raises(ValueError, match="not both"):
        tether.web.app(store)
    with pytest.raises(ValueError, match="not both"):
        tether.web.app(store, tokens={PRIYA: "priya"}, anonymous="x")
    with pytest.raises(ValueError, match="nobody could sign in"):
        tether.web.app(store, tokens={})


def test_tokens_parse_and_refuse(tmp_path: pathlib.Path) -> None:
    assert tether.web.parse_tokens(f"priya:{PRIYA}, sam:{SAM}\n# c\n", source="x") == {
        PRIYA: "priya",
        SAM: "sam",
    }
    assert tether.web.parse_tokens(PRIYA, source="x") == {PRIYA: "console"}
    for text, words in [
        ("priya:short", "shorter than 16"),
        (f"pri ya:{PRIYA}", "is not a name"),
        (f"a:{PRIYA}\nb:{PRIYA}", "given twice"),
        ("# nothing", "holds no token"),
    ]:
        with pytest.raises(tether.web.TokenError, match=words) as info:
            tether.web.parse_tokens(text, source="tokens.txt")
        assert PRIYA not in str(info.value)
    path = tmp_path / "tokens"
    path.write_text(f"priya:{PRIYA}\n")
    assert tether.web.load_tokens(path) == {PRIYA: "priya"}
    assert tether.web.load_tokens(environ={"TETHER_CONSOLE_TOKEN": f"sam:{SAM}"}) == {SAM: "sam"}
    with pytest.raises(tether.web.TokenError, match="--token-file"):
        tether.web.load_tokens(environ={})


def test_serve_refuses_no_auth_off_loopback_and_a_missing_token(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_CONSOLE_TOKEN", raising=False)
    for argv, words in [
        (["--no-auth", "--host", "0.0.0.0"], "--no-auth only with a loopback --host"),
        (["--no-auth", "--host", "192.168.1.5"], "--no-auth only with a loopback --host"),
        ([], "no tokens: give --token-file FILE or set TETHER_CONSOLE_TOKEN"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--root", str(tmp_path), *argv])
        assert exit_info.value.code == 2
        assert words in capsys.readouterr().err


async def test_bearer_requests_need_no_csrf_token_but_no_cross_site_either(file_env: Env) -> None:
    async with console(file_env) as client:
        cross = await client.post(
            f"/api{APPROVE_FORM}", json={}, headers={**auth(), "sec-fetch-site": "cross-site"}
        )
        assert cross.status_code == 403
        ok = await client.post(f"/api{APPROVE_FORM}", json={}, headers=auth())
        assert ok.status_code == 200


async def test_an_open_consoles_api_needs_a_session_and_its_csrf_token(file_env: Env) -> None:
    """Without sign-in a bearer header proves nothing: an API change needs the session a script
    opens with ``GET /api/whoami`` and its CSRF token, as the guard's contract says."""
    loopback = "http://127.0.0.1:8765"
    async with console(file_env, tokens=None, anonymous="ops", base_url=loopback) as client:
        for headers in ({}, {"authorization": "Bearer anything-at-all-here"}):
            refused = await client.post(f"/api{APPROVE_FORM}", json={}, headers=headers)
            assert refused.status_code == 403, headers
            assert "GET /api/whoami opens one" in refused.json()["message"]
        assert not await decisions(file_env)
        me = (await client.get("/api/whoami")).json()
        assert me["identity"] == "ops"
        assert me["csrf"]
        ok = await client.post(f"/api{APPROVE_FORM}", json={}, headers={"x-csrf-token": me["csrf"]})
        assert ok.status_code == 200, ok.text
    (decision,) = await decisions(file_env)
    assert decision.by == "ops"


async def test_the_api_takes_exactly_application_json(file_env: Env) -> None:
    async with console(file_env) as client:
        for kind in ("text/plain; x=application/json", "text/plain;application/json", ""):
            sent = await client.post(
                f"/api{APPROVE_FORM}", content=b"{}", headers={**auth(), "content-type": kind}
            )
            assert sent.status_code == 415, kind
        assert not await decisions(file_env)
        ok = await client.post(
            f"/api{APPROVE_FORM}",
            content=b"{}",
            headers={**auth(), "content-type": "Application/JSON; charset=utf-8"},
        )
        assert ok.status_code == 200


async def test_a_wrong_bearer_token_costs_what_a_failed_sign_in_does(
    file_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[str] = []

    async def penalize(self: Guard) -> None:
        waited.append("guess")

    monkeypatch.setattr(Guard, "penalize", penalize)
    async with console(file_env) as client:
        guess = await client.get("/api/runs", headers={"authorization": "Bearer not-a-token"})
        assert guess.status_code == 401
        assert waited == ["guess"]
        assert (await client.get("/api/runs", headers=auth())).status_code == 200
        assert (await client.get("/api/runs")).status_code == 401  # no guess, no wait
    assert waited == ["guess"]
