"""The console mounted in a service of one's own, as the README shows: a Starlette app whose
lifespan runs a ``Supervisor`` on the store, with ``tether.web.app`` under ``/console``. Every
link, form, redirect and cookie stays under the mount path, and an approval given there is
carried out by that service's supervisor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import tether.web
from tether.journal import Decision
from tether.supervisor import Supervisor

from ..cli._stores import APPROVE, REFUND_CALL, WAIT, Env
from ._envs import BASE, PRIYA, TOKENS, auth

pytestmark = pytest.mark.timeout(120)


async def test_mounted_under_a_path_beside_a_supervisor(env: Env) -> None:
    store = env.store()

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with Supervisor(store, model=env.model(), tools=env.tools(), sweep_interval=0.1):
            yield

    async def home(_: object) -> PlainTextResponse:
        return PlainTextResponse("the service's own page")

    service = Starlette(
        routes=[
            Route("/", home),
            Mount("/console", tether.web.app(store, tokens=TOKENS)),
        ],
        lifespan=lifespan,
    )
    transport = httpx2.ASGITransport(app=service)
    async with (
        service.router.lifespan_context(service),
        httpx2.AsyncClient(transport=transport, base_url=BASE) as client,
    ):
        assert (await client.get("/")).text == "the service's own page"
        stranger = await client.get("/console/inbox")
        assert stranger.status_code == 303
        assert stranger.headers["location"] == "/console/login?next=%2Finbox"
        signed = await client.post("/console/login", data={"token": PRIYA, "next": "/inbox"})
        assert signed.status_code == 303
        assert signed.headers["location"] == "/console/inbox"
        assert "Path=/console" in signed.headers["set-cookie"]
        inbox = await client.get("/console/inbox")
        assert inbox.status_code == 200
        form = f'action="/console/runs/{APPROVE}/calls/{REFUND_CALL}/approve"'
        assert form in inbox.text
        assert 'href="/console/static/console.css"' in inbox.text
        assert 'src="/console/static/console.js"' in inbox.text
        assert (await client.get("/console/static/console.js")).status_code == 200
        csrf = inbox.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        approved = await client.post(
            f"/console/runs/{APPROVE}/calls/{REFUND_CALL}/approve",
            data={"csrf": csrf, "next": "/inbox", "note": "from the service"},
        )
        assert approved.status_code == 303
        assert approved.headers["location"].startswith("/console/inbox?flash=")
        with anyio.fail_after(WAIT):  # the service's supervisor picks the answer up
            while True:
                run = (await client.get(f"/console/api/runs/{APPROVE}", headers=auth())).json()
                if run["summary"]["status"] == "done":
                    break
                await anyio.sleep(0.05)
    assert env.refunds == ["o-1"]
    (decision,) = [e for e in await env.events(APPROVE) if isinstance(e, Decision)]
    assert (decision.by, decision.note) == ("priya", "from the service")
