"""A web service that creates runs and leaves them to ``tether worker``: ``uvicorn service:app``.

``POST /tickets`` creates a run (``drive=False``) and answers 202 at once; a worker on the same
store drives it. ``GET /tickets/{run_id}`` says where it stands. The console is mounted at
``/console``, for the person who approves the replies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from approval import build
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

import tether
import tether.web

store = tether.FileStore("tether-data")
agent = build()  # the same model and tools as the worker: each run pins them


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    # resume=False: this process drives no run; the workers do. Entering the supervisor
    # enters the store, which the mounted console needs too.
    async with tether.Supervisor(store, model=agent.model, tools=agent.tools, resume=False) as sup:
        app.state.supervisor = sup
        yield


async def create_ticket(request: Request) -> JSONResponse:
    body = await request.json()
    run_id = f"ticket-{body['ticket']}"
    sup: tether.Supervisor = request.app.state.supervisor
    try:
        await sup.start(run_id, f"Ticket {body['ticket']}: {body['text']}", drive=False)
    except tether.InvalidRunIdError as exc:  # ids from outside are checked, never a path
        return JSONResponse({"error": str(exc)}, status_code=400)
    except tether.RunExistsError:
        return JSONResponse({"error": f"{run_id} exists"}, status_code=409)
    return JSONResponse({"run_id": run_id}, status_code=202)


async def ticket(request: Request) -> JSONResponse:
    sup: tether.Supervisor = request.app.state.supervisor
    try:
        view = await sup.inspect(request.path_params["run_id"])
    except (tether.RunNotFoundError, tether.InvalidRunIdError):
        return JSONResponse({"error": "no such ticket"}, status_code=404)
    return JSONResponse(
        {"status": view.status.value, "waiting_for": list(view.pending), "answer": view.final_text}
    )


app = Starlette(
    routes=[
        Route("/tickets", create_ticket, methods=["POST"]),
        Route("/tickets/{run_id}", ticket),
        Mount("/console", tether.web.app(store, tokens=tether.web.load_tokens("tokens"))),
    ],
    lifespan=lifespan,
)
