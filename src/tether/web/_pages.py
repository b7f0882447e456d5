"""The console's pages: runs, a run, the inbox, a blob, signing in and out, and the forms.

Every page is rendered by an autoescaping template from the data ``_views`` computes. A page
asked for with ``X-Tether-Fragment: 1`` is rendered without its frame: the script of the page
fetches it when the server says runs changed, and swaps it in. Forms post back here; each
answer goes through ``_actions.act`` and the person is sent back where they were with what
happened (``recorded: ...`` or the refusal).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .._errors import InvalidRunIdError, JournalError, RunNotFoundError
from ..journal import ToolResult
from ..operate import load_summary
from ..operate._deploy import fleet_of, offers
from ..supervisor import RunStatus
from ._actions import ActionError, act
from ._console import (
    BodyTooLarge,
    Console,
    base_of,
    local_path,
    read_form,
    safe_next,
    set_cookie,
    with_flash,
)
from ._guard import COOKIE, Session, Who
from ._views import inbox, inbox_page, pretty, run_row, runs_page, timeline

Handler = Callable[[Request], Awaitable[Response]]


def page_routes(console: Console) -> list[Route]:
    """The routes of the pages and their forms."""
    guard = console.guard

    def identify(request: Request) -> tuple[Who | None, Session | None]:
        """Who asks, and a session opened just now for an anonymous console's visitor."""
        who = guard.who(request)
        if who is None and guard.anonymous is not None:
            session = guard.new_session(guard.anonymous)
            return Who(session.identity, session), session
        return who, None

    def render(
        request: Request,
        who: Who | None,
        opened: Session | None,
        template: str,
        *,
        status: int = 200,
        **context: Any,
    ) -> Response:
        fragment = request.headers.get("x-tether-fragment") == "1"
        session = who.session if who is not None else None
        flash: list[tuple[str, str]] = []
        key = request.query_params.get("flash")
        if session is not None and not fragment and key is not None and key in session.flash:
            flash = [session.flash.pop(key)]
        values: dict[str, Any] = {
            "base": base_of(request),
            "who": who.identity if who is not None else None,
            "can_logout": session is not None and not guard.open,
            "csrf": session.csrf if session is not None else "",
            "flash": flash,
            "fragment": fragment,
            "here": local_path(request),
            "live": False,
            "nav": "",
        }
        values.update(context)
        html = console.templates.get_template(template).render(values)
        response = HTMLResponse(html, status_code=status)
        if opened is not None:
            set_cookie(request, response, opened)
        return response

    def problem_page(
        request: Request, who: Who | None, status: int, heading: str, message: str
    ) -> Response:
        return render(
            request,
            who,
            None,
            "error.html",
            status=status,
            title=heading,
            heading=heading,
            message=message,
        )

    def signed_in(
        handler: Callable[[Request, Who, Session | None], Awaitable[Response]],
    ) -> Handler:
        async def wrapped(request: Request) -> Response:
            who, opened = identify(request)
            if who is None:
                target = safe_next(local_path(request))
                return RedirectResponse(
                    f"{base_of(request)}/login?next={_quote(target)}", status_code=303
                )
            try:
                return await handler(request, who, opened)
            except (RunNotFoundError, InvalidRunIdError):
                return problem_page(request, who, 404, "No such run", "There is no run of that id.")
            except JournalError as exc:
                return problem_page(request, who, 500, "The journal cannot be read", str(exc))
            except BodyTooLarge:
                return problem_page(request, who, 413, "Too large", "The form is too large.")

        return wrapped

    async def runs(request: Request, who: Who, opened: Session | None) -> Response:
        status = request.query_params.get("status") or None
        if status not in (None, *(s.value for s in RunStatus)):
            status = None
        number = _page_number(request)
        query = request.query_params.get("q", "").strip()
        summaries = await console.listing.summaries()
        page = runs_page(
            summaries,
            console.clock(),
            status=status,
            query=query,
            page=number,
            per_page=console.per_page,
            groups=console.listing.by_status(summaries),
        )
        return render(
            request,
            who,
            opened,
            "runs.html",
            title="Runs",
            nav="runs",
            live=True,
            page=page,
            chosen=status,
            query=query,
        )

    async def run(request: Request, who: Who, opened: Session | None) -> Response:
        run_id = request.path_params["run_id"]
        now = console.clock()
        events, summary = await load_summary(console.store, run_id, now=now)
        state = summary.state
        retryable = state is not None and (
            summary.status == RunStatus.FAILED
            or (state.parked is not None and not summary.finished)
        )
        parked_for_contract = (
            state is not None and state.parked is not None and state.parked.cause == "contract"
        )
        return render(
            request,
            who,
            opened,
            "run.html",
            title=f"Run {run_id}",
            nav="runs",
            live=True,
            run=run_row(summary, now),
            waiting=inbox([summary], now)["calls"],
            events=timeline(events),
            finished=summary.finished,
            retryable=retryable,
            offers=offers(state, await fleet_of(console.store), now)
            if state is not None and parked_for_contract
            else [],
        )

    async def inbox_list(request: Request, who: Who, opened: Session | None) -> Response:
        summaries = await console.listing.summaries()
        items = inbox_page(
            summaries,
            console.clock(),
            await fleet_of(console.store),
            page=_page_number(request),
            per_page=console.per_page,
        )
        return render(
            request, who, opened, "inbox.html", title="Inbox", nav="inbox", live=True, items=items
        )

    async def blob(request: Request, who: Who, opened: Session | None) -> Response:
        run_id, digest = request.path_params["run_id"], request.path_params["digest"]
        for event in await console.store.read(run_id):
            if (
                isinstance(event, ToolResult)
                and event.blob is not None
                and event.blob.digest == digest
            ):
                content = await console.store.load_blob(event.blob)
                text = content if isinstance(content, str) else pretty(content)
                return render(
                    request,
                    who,
                    opened,
                    "blob.html",
                    title=f"Blob of {run_id}",
                    nav="runs",
                    run_id=run_id,
                    digest=digest,
                    size=event.blob.size,
                    call_id=event.call_id,
                    content=text,
                )
        return problem_page(
            request, who, 404, "No such blob", "No result of this run refers to it."
        )

    def answer(verb: str) -> Handler:
        async def post(request: Request, who: Who, opened: Session | None) -> Response:
            form = await read_form(request)
            problem = guard.csrf_problem(request, who, form.get("csrf"))
            if problem is not None:
                return problem_page(request, who, 403, "Refused", problem)
            run_id = request.path_params["run_id"]
            call_id = request.path_params.get("call_id")
            target = f"{base_of(request)}{safe_next(form.get('next'))}"
            try:
                answered = await act(
                    console.store, verb, run_id, call_id, _params(verb, form), by=who.identity
                )
            except ActionError as exc:
                if who.session is not None:
                    key = who.session.add_flash("error", exc.message)
                    return RedirectResponse(with_flash(target, key), status_code=303)
                return problem_page(request, who, exc.status, "Not recorded", exc.message)
            console.listing.forget(run_id)
            if who.session is not None:
                key = who.session.add_flash("ok", answered.message)
                return RedirectResponse(with_flash(target, key), status_code=303)
            return RedirectResponse(target, status_code=303)

        return signed_in(post)

    async def login_form(request: Request) -> Response:
        if guard.open or guard.who(request) is not None:
            return RedirectResponse(f"{base_of(request)}/", status_code=303)
        return render(
            request,
            None,
            None,
            "login.html",
            title="Sign in",
            next=safe_next(request.query_params.get("next")),
        )

    async def login(request: Request) -> Response:
        problem = guard.cross_site(request)
        if problem is not None:
            return problem_page(request, None, 403, "Refused", problem)
        try:
            form = await read_form(request)
        except BodyTooLarge:
            return problem_page(request, None, 413, "Too large", "The form is too large.")
        identity = guard.identity_for(form.get("token", "").strip()) if not guard.open else None
        if identity is None:
            await guard.penalize()  # guesses cost time
            return render(
                request,
                None,
                None,
                "login.html",
                status=401,
                title="Sign in",
                next=safe_next(form.get("next")),
                flash=[("error", "That token is not one of the console's.")],
            )
        session = guard.new_session(identity)
        response = RedirectResponse(
            f"{base_of(request)}{safe_next(form.get('next'))}", status_code=303
        )
        set_cookie(request, response, session)
        return response

    async def logout(request: Request, who: Who, opened: Session | None) -> Response:
        form = await read_form(request)
        problem = guard.csrf_problem(request, who, form.get("csrf"))
        if problem is not None:
            return problem_page(request, who, 403, "Refused", problem)
        if who.session is not None:
            guard.end(who.session)
        response = RedirectResponse(f"{base_of(request)}/login", status_code=303)
        response.delete_cookie(COOKIE, path=base_of(request) or "/")
        return response

    routes = [
        Route("/", signed_in(runs), methods=["GET"]),
        Route("/inbox", signed_in(inbox_list), methods=["GET"]),
        Route("/runs/{run_id}", signed_in(run), methods=["GET"]),
        Route("/runs/{run_id}/blobs/{digest}", signed_in(blob), methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", signed_in(logout), methods=["POST"]),
    ]
    for verb in ("approve", "reject", "resolve"):
        routes.append(
            Route(f"/runs/{{run_id}}/calls/{{call_id}}/{verb}", answer(verb), methods=["POST"])
        )
    for verb in ("retry", "cancel", "signal", "repin"):
        routes.append(Route(f"/runs/{{run_id}}/{verb}", answer(verb), methods=["POST"]))
    return routes


def _page_number(request: Request) -> int:
    """The ``page`` the query asks for (1 if none, or not a number)."""
    try:
        return int(request.query_params.get("page", "1"))
    except ValueError:
        return 1


def _quote(path: str) -> str:
    return quote(path, safe="")


def _json_field(form: dict[str, str], key: str) -> Any:
    text = form.get(key, "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ActionError(400, "bad_request", f"{key} is not valid JSON: {exc}") from None


def _params(verb: str, form: dict[str, str]) -> dict[str, Any]:
    """A form's fields as ``act`` takes them (JSON fields decoded, budgets parsed)."""
    params: dict[str, Any] = {
        k: v for k, v in form.items() if k in ("note", "outcome", "reason", "name", "id", "worker")
    }
    if verb == "resolve":
        params["result"] = _json_field(form, "result")
    if verb == "signal":
        params["data"] = _json_field(form, "data")
    if verb == "retry":
        extend: dict[str, float] = {}
        for item in form.get("extend", "").replace(",", " ").split():
            name, sep, amount = item.partition("=")
            try:
                extend[name] = (float if name == "deadline_s" else int)(amount)
            except ValueError:
                raise ActionError(400, "bad_request", f"expected LIMIT=N, got {item!r}") from None
            if not sep:
                raise ActionError(400, "bad_request", f"expected LIMIT=N, got {item!r}")
        params["extend"] = extend
    return params
