"""``tether.web.app``: the console as an ASGI application, to serve or to mount."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ..journal import Store
from ._api import api_routes
from ._console import Console, LoopbackOnly, SecurityHeaders, templates
from ._guard import Guard
from ._listing import Listing
from ._pages import page_routes


def app(
    store: Store,
    *,
    tokens: Mapping[str, str] | None = None,
    anonymous: str | None = None,
    poll_interval: float = 1.0,
    per_page: int = 50,
    session_lifetime: float = 12 * 3600.0,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The web console over ``store``: runs, a run's timeline, the inbox, and a JSON API.

    Give ``tokens`` (token -> identity, e.g. from ``load_tokens``): a person signs in with a
    token, and every answer they give is recorded with that identity as ``by``. Or, for a
    console nobody else can reach, ``anonymous="name"``: no sign-in, every request acts as
    ``name`` (``tether serve --no-auth``, bound to 127.0.0.1); such a console answers only
    requests addressed to a loopback name (``Host``: localhost, 127.0.0.1, [::1]), so that
    another site cannot reach it by pointing its own name at 127.0.0.1. Exactly one of the two.

    The store is used as it is when it is already entered (a service that runs a
    ``Supervisor`` on it), else the application enters it for its lifetime (its lifespan:
    serving it with uvicorn does that; a mounted sub-application's lifespan does not run, so
    enter the store in your own). Reading never needs it entered; recording an answer does.

    Args:
        poll_interval: seconds between looks at the store for the live updates.
        per_page: runs per page of the runs list, and items per page of the inbox.
        session_lifetime: seconds a browser stays signed in after its last request.
        clock: wall-clock time (statuses that change with time, such as deadlines).

    Raises:
        ValueError: neither or both of ``tokens`` and ``anonymous``, or no token.
    """
    guard = Guard(tokens=tokens, anonymous=anonymous, lifetime=session_lifetime, clock=clock)
    console = Console(
        store=store,
        guard=guard,
        listing=Listing(store, clock=clock),
        templates=templates(),
        clock=clock,
        poll_interval=poll_interval,
        per_page=per_page,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if store.entered:
            yield
            return
        async with store:
            yield

    routes = [
        *api_routes(console),
        *page_routes(console),
        Mount("/static", StaticFiles(packages=[("tether.web", "static")]), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if anonymous is not None:
        middleware.append(Middleware(LoopbackOnly))
    application = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    application.state.console = console
    return application
