"""Who is asking, and whether a request that changes something may: sessions, tokens, CSRF.

A request is authenticated by an ``Authorization: Bearer TOKEN`` header (scripts, the JSON API)
or by the cookie of a session a person opened by giving a token to the login form. The identity
comes from the token alone: an answer records as ``by`` the identity of whoever is signed in,
never a name a form or a body carries. Without tokens (``anonymous``, the ``--no-auth`` of a
console bound to 127.0.0.1) every request acts as one fixed identity, and still gets a session,
so that state-changing requests are CSRF-protected the same way.

A state-changing request over a session must pass three checks, any of which refuses it:

- ``Sec-Fetch-Site``, where the browser sends it, is ``same-origin`` or ``none``;
- ``Origin`` (or, without it, ``Referer``), where sent, names this server's own host;
- the session's CSRF token comes with it (form field ``csrf`` or header ``X-CSRF-Token``),
  compared in constant time.

A bearer token is not sent by a browser on its own, so a request carrying one needs no CSRF
token; the fetch-site and origin checks still apply. Without tokens a bearer header proves
nothing, so there every change needs a session and its CSRF token (``GET /api/whoami`` opens
one for a script). A wrong token costs ``FAILED_SIGN_IN_DELAY`` as a failed sign-in does.

Sessions live in memory (a restart signs everyone out): at most ``limit`` of them, each for
``lifetime`` seconds after it was last used.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from starlette.requests import Request

from ._tokens import identity_of

COOKIE = "tether_console"
FLASH_KEPT = 20

FAILED_SIGN_IN_DELAY = 0.3
"""Seconds a failed sign-in or a wrong bearer token waits before its answer: guesses cost time."""


@dataclass
class Session:
    """One signed-in browser: who it is, its CSRF token, messages for its next page."""

    key: str
    identity: str
    csrf: str
    last_used: float
    flash: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add_flash(self, kind: str, message: str) -> str:
        """Keep ``message`` for the page its answer sends the browser to, under a new key
        that page's URL carries (``?flash=``): each tab shows its own answer's message, not
        another's. The newest ``FLASH_KEPT`` are kept (a redirect never followed)."""
        key = secrets.token_urlsafe(6)
        self.flash[key] = (kind, message)
        while len(self.flash) > FLASH_KEPT:
            del self.flash[next(iter(self.flash))]
        return key


@dataclass(frozen=True)
class Who:
    """The identity behind a request, and how it was proven."""

    identity: str
    session: Session | None = None
    anonymous: bool = False  # a console without sign-in, and no session yet

    @property
    def bearer(self) -> bool:
        """Proven by a bearer token (which no browser sends by itself)."""
        return self.session is None and not self.anonymous


class Guard:
    """Authentication and CSRF checks for one console.

    Args:
        tokens: token -> identity; ``None`` with ``anonymous``.
        anonymous: the identity every request acts as when there are no tokens.
        lifetime: seconds a session lasts after its last use.
        limit: sessions kept at once (the least recently used goes first).
        clock: wall-clock time.
    """

    def __init__(
        self,
        *,
        tokens: Mapping[str, str] | None,
        anonymous: str | None,
        lifetime: float = 12 * 3600.0,
        limit: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (tokens is None) == (anonymous is None):
            raise ValueError("give tokens, or an anonymous identity (no authentication), not both")
        if tokens is not None and not tokens:
            raise ValueError("tokens is empty: nobody could sign in")
        self.tokens = dict(tokens) if tokens is not None else None
        self.anonymous = anonymous
        self.lifetime = lifetime
        self.limit = limit
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    @property
    def open(self) -> bool:
        """Whether anyone may use the console without a token."""
        return self.tokens is None

    def identity_for(self, token: str) -> str | None:
        """The identity ``token`` stands for, or ``None``."""
        return None if self.tokens is None else identity_of(self.tokens, token)

    def new_session(self, identity: str) -> Session:
        while len(self._sessions) >= self.limit:
            self._sessions.popitem(last=False)
        session = Session(
            key=secrets.token_urlsafe(32),
            identity=identity,
            csrf=secrets.token_urlsafe(32),
            last_used=self.clock(),
        )
        self._sessions[session.key] = session
        return session

    def end(self, session: Session) -> None:
        self._sessions.pop(session.key, None)

    def _session(self, request: Request) -> Session | None:
        key = request.cookies.get(COOKIE)
        if not key:
            return None
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self.clock()
        if now - session.last_used > self.lifetime:
            self.end(session)
            return None
        session.last_used = now
        self._sessions.move_to_end(key)
        return session

    def who(self, request: Request) -> Who | None:
        """Who sent ``request``: a bearer token's identity, a session's, or ``None``.

        With ``anonymous`` a request without a session is ``anonymous`` too, with no session
        (the page it gets opens one).
        """
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip() and self.tokens is not None:
            identity = self.identity_for(value.strip())
            return Who(identity) if identity is not None else None
        # Without tokens a bearer header proves nothing: a session (and its CSRF token) does.
        session = self._session(request)
        if session is not None:
            return Who(session.identity, session)
        return None

    async def penalize(self) -> None:
        """Wait ``FAILED_SIGN_IN_DELAY`` before answering a guess (a wrong token)."""
        await anyio.sleep(FAILED_SIGN_IN_DELAY)

    def failed_bearer(self, request: Request) -> bool:
        """Whether ``request`` carried a bearer token that is not one of the tokens (a guess:
        answered after ``FAILED_SIGN_IN_DELAY``, as a failed sign-in is)."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return (
            self.tokens is not None
            and scheme.lower() == "bearer"
            and self.identity_for(value.strip()) is None
        )

    def cross_site(self, request: Request) -> str | None:
        """Why ``request`` looks like it comes from another site, or ``None``."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a {site} request may not change anything here"
        origin = request.headers.get("origin") or request.headers.get("referer")
        if origin is not None and origin != "null":
            host = request.headers.get("host", "")
            if urlsplit(origin).netloc.lower() != host.lower():
                return "the request comes from another origin"
        elif origin == "null":
            return "the request comes from an opaque origin"
        return None

    def csrf_problem(self, request: Request, who: Who, given: str | None) -> str | None:
        """Why a state-changing ``request`` from ``who`` must be refused, or ``None``."""
        problem = self.cross_site(request)
        if problem is not None:
            return problem
        if who.bearer:
            return None  # a bearer token: no browser sends one by itself
        if who.session is None:
            return (
                "this console has no sign-in, so a change needs a session and its CSRF token: "
                "GET /api/whoami opens one (a cookie) and gives the token for X-CSRF-Token"
            )
        if not given or not hmac.compare_digest(given.encode(), who.session.csrf.encode()):
            return "the form is out of date or was not sent from this console (CSRF token)"
        return None
