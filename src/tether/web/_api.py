"""The console's JSON API: everything the pages do, for scripts and other services.

Authenticated by ``Authorization: Bearer TOKEN`` (or a console session's cookie, whose POSTs
then need the ``X-CSRF-Token`` header). Refusals are the command line's sentences, with an HTTP
status: 400 bad input, 401 not signed in, 403 a cross-site or CSRF failure, 404 no such run or
call, 409 refused by the run's state (``answer_problem``) or busy, 503 the store failed. The
whole of it is described by ``/api/openapi.json``.

``GET /api/events`` is a stream of server-sent events: ``change`` whenever a run was written to
or its status moved, with the ids of the runs that changed and the counts per status.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._errors import InvalidRunIdError, JournalError, RunNotFoundError
from ..journal import ToolResult
from ..operate import RunSummary, load_summary
from ..operate._deploy import fleet_of
from ..supervisor import RunStatus
from ._actions import ActionError, act
from ._console import BodyTooLarge, Console, media_type, read_json, set_cookie
from ._guard import Who
from ._views import inbox, run_row, runs_page, timeline

Handler = Callable[[Request], Awaitable[Response]]


def error(status: int, code: str, message: str) -> JSONResponse:
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


def api_routes(console: Console) -> list[Route]:
    """The routes under ``/api``."""
    guard = console.guard

    def authed(handler: Callable[[Request, Who], Awaitable[Response]]) -> Handler:
        async def wrapped(request: Request) -> Response:
            who = guard.who(request)
            if who is None and guard.anonymous is not None:
                who = Who(guard.anonymous, anonymous=True)
            if who is None:
                if guard.failed_bearer(request):
                    await guard.penalize()  # guesses cost time
                return error(401, "unauthorized", "sign in: send Authorization: Bearer TOKEN")
            try:
                return await handler(request, who)
            except InvalidRunIdError as exc:  # as an answer to it is refused: bad input
                return error(400, "bad_request", str(exc))
            except RunNotFoundError:
                run_id = request.path_params.get("run_id")
                return error(404, "not_found", f"no run {run_id!r}")
            except JournalError as exc:
                return error(500, "unreadable", str(exc))

        return wrapped

    async def list_runs(request: Request, who: Who) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in {s.value for s in RunStatus}:
            return error(400, "bad_request", f"no status {status!r}")
        try:
            number = int(request.query_params.get("page", "1"))
            per_page = min(500, max(1, int(request.query_params.get("per_page", console.per_page))))
        except ValueError:
            return error(400, "bad_request", "page and per_page are whole numbers")
        summaries = await console.listing.summaries()
        page = runs_page(
            summaries,
            console.clock(),
            status=status,
            query=request.query_params.get("q", "").strip(),
            page=number,
            per_page=per_page,
            groups=console.listing.by_status(summaries),
        )
        return JSONResponse(
            {
                "runs": page.rows,
                "counts": page.counts,
                "total": page.total,
                "matching": page.matching,
                "page": page.page,
                "pages": page.pages,
                "per_page": page.per_page,
            }
        )

    async def show(request: Request, who: Who) -> Response:
        run_id = request.path_params["run_id"]
        now = console.clock()
        events, summary = await load_summary(console.store, run_id, now=now)
        rows = timeline(events)
        return JSONResponse(
            {
                "summary": run_row(summary, now),
                "waiting": inbox([summary], now)["calls"],
                "events": [
                    {**row["record"], "type": row["type"], "text": row["text"]} for row in rows
                ],
            }
        )

    async def blob(request: Request, who: Who) -> Response:
        run_id, digest = request.path_params["run_id"], request.path_params["digest"]
        for event in await console.store.read(run_id):
            if (
                isinstance(event, ToolResult)
                and event.blob is not None
                and event.blob.digest == digest
            ):
                content = await console.store.load_blob(event.blob)
                return JSONResponse(
                    {"digest": digest, "call_id": event.call_id, "content": content}
                )
        return error(404, "not_found", f"no result of run {run_id!r} refers to blob {digest}")

    async def inbox_items(request: Request, who: Who) -> Response:
        summaries = await console.listing.summaries()
        return JSONResponse(inbox(summaries, console.clock(), await fleet_of(console.store)))

    async def whoami(request: Request, who: Who) -> Response:
        session = who.session
        opened = None
        if session is None and who.anonymous:  # a console without sign-in: a session for it
            session = opened = guard.new_session(who.identity)
        response = JSONResponse(
            {"identity": who.identity, "csrf": session.csrf if session else None}
        )
        if opened is not None:
            set_cookie(request, response, opened)
        return response

    def answer(verb: str) -> Handler:
        async def post(request: Request, who: Who) -> Response:
            problem = guard.csrf_problem(request, who, request.headers.get("x-csrf-token"))
            if problem is not None:
                return error(403, "forbidden", problem)
            if media_type(request) != "application/json":
                return error(415, "unsupported_media_type", "send the body as application/json")
            try:
                params = await read_json(request)
            except BodyTooLarge:
                return error(413, "too_large", "the body is too large")
            except ValueError as exc:
                return error(400, "bad_request", f"the body is not a JSON object: {exc}")
            run_id = request.path_params["run_id"]
            try:
                answered = await act(
                    console.store,
                    verb,
                    run_id,
                    request.path_params.get("call_id"),
                    params,
                    by=who.identity,
                )
            except ActionError as exc:
                return error(exc.status, exc.error, exc.message)
            console.listing.forget(run_id)
            return JSONResponse(
                {
                    "recorded": not answered.repeated,
                    "queued": answered.queued,
                    "repeated": answered.repeated,
                    "message": answered.message,
                }
            )

        return authed(post)

    async def events(request: Request, who: Who) -> Response:
        return StreamingResponse(
            _changes(console, request),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def openapi(request: Request) -> Response:
        text = resources.files("tether.web").joinpath("openapi.json").read_text("utf-8")
        return Response(text, media_type="application/json")

    routes = [
        Route("/api/runs", authed(list_runs), methods=["GET"]),
        Route("/api/runs/{run_id}", authed(show), methods=["GET"]),
        Route("/api/runs/{run_id}/blobs/{digest}", authed(blob), methods=["GET"]),
        Route("/api/inbox", authed(inbox_items), methods=["GET"]),
        Route("/api/whoami", authed(whoami), methods=["GET"]),
        Route("/api/events", authed(events), methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
    ]
    for verb in ("approve", "reject", "resolve"):
        routes.append(
            Route(f"/api/runs/{{run_id}}/calls/{{call_id}}/{verb}", answer(verb), methods=["POST"])
        )
    for verb in ("retry", "cancel", "signal", "repin"):
        routes.append(Route(f"/api/runs/{{run_id}}/{verb}", answer(verb), methods=["POST"]))
    return routes


def _fingerprint(summaries: list[RunSummary]) -> dict[str, str]:
    return {s.run_id: f"{s.status}|{s.events}|{s.held_by}|{s.last_at}" for s in summaries}


async def _changes(console: Console, request: Request) -> AsyncIterator[str]:
    """Server-sent events: ``change`` each time runs changed, for ``stream_for`` seconds (the
    browser then reconnects, sending the last id it saw, and misses nothing)."""
    yield f"retry: {int(console.poll_interval * 1000) + 500}\n\n"
    seen: dict[str, str] | None = None
    last_id = request.headers.get("last-event-id")
    with anyio.move_on_after(console.stream_for):
        while True:
            try:
                summaries = await console.listing.summaries()
            except Exception:  # the store is unreachable for now: say nothing, look again
                summaries = None
            if summaries is not None:
                now = _fingerprint(summaries)
                tag = hashlib.sha256(json.dumps(sorted(now.items())).encode()).hexdigest()[:16]
                if seen is None:
                    if last_id is not None and last_id != tag:
                        yield _event("change", tag, {"changed": [], "counts": _counts(summaries)})
                    else:
                        yield f"id: {tag}\n\n"
                elif now != seen:
                    changed = sorted(
                        k for k in now.keys() | seen.keys() if now.get(k) != seen.get(k)
                    )
                    data: dict[str, Any] = {"changed": changed[:100], "counts": _counts(summaries)}
                    yield _event("change", tag, data)
                seen = now
            if await request.is_disconnected():
                return
            await anyio.sleep(console.poll_interval)


def _counts(summaries: list[RunSummary]) -> dict[str, int]:
    counts = {s.value: 0 for s in RunStatus}
    for s in summaries:
        counts[s.status] = counts.get(s.status, 0) + 1
    return counts


def _event(kind: str, tag: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\nid: {tag}\ndata: {json.dumps(data)}\n\n"
