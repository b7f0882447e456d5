"""The same service on FastAPI: ``uvicorn service_fastapi:app``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from approval import build
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

import tether
import tether.web

store = tether.FileStore("tether-data")
agent = build()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with tether.Supervisor(store, model=agent.model, tools=agent.tools, resume=False) as sup:
        app.state.supervisor = sup
        yield


app = FastAPI(lifespan=lifespan)
app.mount("/console", tether.web.app(store, tokens=tether.web.load_tokens("tokens")))


class Ticket(BaseModel):
    ticket: str
    text: str


@app.post("/tickets", status_code=202)
async def create_ticket(body: Ticket, request: Request) -> dict[str, str]:
    run_id = f"ticket-{body.ticket}"
    try:
        await request.app.state.supervisor.start(
            run_id, f"Ticket {body.ticket}: {body.text}", drive=False
        )
    except tether.InvalidRunIdError as exc:
        raise HTTPException(400, str(exc)) from exc
    except tether.RunExistsError as exc:
        raise HTTPException(409, f"{run_id} exists") from exc
    return {"run_id": run_id}


@app.get("/tickets/{run_id}")
async def ticket(run_id: str, request: Request) -> dict[str, Any]:
    try:
        view = await request.app.state.supervisor.inspect(run_id)
    except (tether.RunNotFoundError, tether.InvalidRunIdError) as exc:
        raise HTTPException(404, "no such ticket") from exc
    return {
        "status": view.status.value,
        "waiting_for": list(view.pending),
        "answer": view.final_text,
    }
