"""What every handler of one console shares: the store, the guard, the listing, the templates.

Also the small pieces of HTTP both the pages and the API need: the mount's base path, where a
form may send a person back to, reading a small form or JSON body, the headers every response
gets.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import jinja2
import markupsafe
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..journal import Store
from ..operate._display import visible
from ._guard import COOKIE, Guard, Session
from ._listing import Listing
from ._views import when

MAX_BODY = 1024 * 1024

# No inline script or style anywhere: the pages load one script and one stylesheet of their own.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


@dataclass
class Console:
    """One console's shared state."""

    store: Store
    guard: Guard
    listing: Listing
    templates: jinja2.Environment
    clock: Callable[[], float] = time.time
    poll_interval: float = 1.0
    stream_for: float = 30.0
    per_page: int = 50


def templates() -> jinja2.Environment:
    """The page templates, autoescaping everything they insert."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tether.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters["when"] = when
    env.filters["segment"] = segment
    return env


def _shown(value: object) -> object:
    """Every value a template inserts, with its bidirectional controls written out
    (``visible``): a right-to-left override in a model's arguments would show them to their
    approver in another order than the tool gets them. Markup stays markup."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(visible(str(value)))
    if isinstance(value, str):
        return visible(value)
    return value


def segment(value: object) -> str:
    """``value`` quoted as one path segment of a URL, with nothing left unquoted that a
    browser would read as structure (``/``, ``.``, ``?``, ``#``, ``%``...).

    Run ids and call ids are checked where they enter (a run id's alphabet, a model's call id
    renamed into a safe one before it is journaled), so this is the second fence: even a
    journal written before those checks cannot make a form post to another run's URL. Jinja's
    ``urlencode`` leaves ``/`` alone, which is why it is not used for path segments.
    """
    text = quote(str(value), safe="")
    # "." and ".." are the segments a browser resolves; quote() leaves dots alone.
    return text.replace(".", "%2E") if text.strip(".") == "" else text


def media_type(request: Request) -> str:
    """The request body's media type, without parameters, lower-cased (``""`` if none)."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def base_of(request: Request) -> str:
    """The path the console is mounted at (``""`` at the root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def local_path(request: Request) -> str:
    """The request's path and query below the mount (what ``next`` sends a person back to),
    without the key of the message it showed (``flash``)."""
    path = request.url.path
    base = base_of(request)
    if base and path.startswith(base):
        path = path[len(base) :] or "/"
    query = urlencode(_without_flash(request.url.query))
    return path + (f"?{query}" if query else "")


def with_flash(target: str, key: str) -> str:
    """``target`` (a path of this console) with the key of the message its page shows."""
    target, mark, fragment = target.partition("#")
    path, _, query = target.partition("?")
    return f"{path}?{urlencode([*_without_flash(query), ('flash', key)])}{mark}{fragment}"


def _without_flash(query: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "flash"]


def safe_next(value: str | None) -> str:
    """``value`` if it is a path of this console, else ``/``: a form never redirects away."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(ch) < 32 for ch in value):
        return "/"
    return value


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request) -> bytes:
    """The request's body, at most ``MAX_BODY`` bytes.

    Raises:
        BodyTooLarge: it is longer.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the first value of each field)."""
    text = (await read_body(request)).decode("utf-8", errors="replace")
    form: dict[str, str] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        form.setdefault(key, value)
    return form


async def read_json(request: Request) -> dict[str, Any]:
    """A JSON object body (an empty body is ``{}``).

    Raises:
        ValueError: it is not a JSON object.
    """
    body = await read_body(request)
    if not body.strip():
        return {}
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError("the body must be a JSON object")
    return value


class SecurityHeaders:
    """Adds the console's security headers to every response, and ``no-store`` to all but the
    static assets (pages and API answers carry customer data)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = "/static/" in str(scope.get("path", ""))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                headers += [(k, v) for k, v in HEADERS if k not in names]
                if b"cache-control" not in names:
                    cache = b"public, max-age=300" if static else b"no-store"
                    headers.append((b"cache-control", cache))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine's loopback (``localhost``, ``127.0.0.1``,
    ``[::1]``, with or without a port)."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackOnly:
    """Refuses every request whose ``Host`` is not a loopback name: a console without sign-in
    must not answer a page of another site whose name was made to point at 127.0.0.1 (DNS
    rebinding), which could otherwise read it and post its forms as a same-origin page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = ""
        for name, value in scope.get("headers", []):
            if name == b"host":
                host = value.decode("latin-1")
                break
        if loopback_host(host):
            await self.app(scope, receive, send)
            return
        body = (
            "This console has no sign-in (--no-auth) and answers only requests addressed to "
            f"localhost, 127.0.0.1 or [::1], not {host!r}.\n"
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def set_cookie(request: Request, response: Response, session: Session) -> None:
    """Give the browser (or script) the cookie of ``session``."""
    response.set_cookie(
        COOKIE,
        session.key,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path=base_of(request) or "/",
    )
