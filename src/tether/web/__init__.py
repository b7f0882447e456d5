"""The web console: every run, what it waits for, and an inbox of answers a person can give.

``tether serve`` serves it; ``tether.web.app(store, tokens=...)`` returns it as an ASGI
application to mount in a Starlette or FastAPI service. Needs the ``web`` extra
(``pip install 'tether[web]'``: Starlette, uvicorn, Jinja2); ``import tether`` never loads it.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._app import app as app
from ._tokens import ENV_TOKEN as ENV_TOKEN
from ._tokens import TokenError as TokenError
from ._tokens import load_tokens as load_tokens
from ._tokens import parse_tokens as parse_tokens

__all__ = ["ENV_TOKEN", "TokenError", "app", "load_tokens", "parse_tokens"]

_publish(__name__, globals(), __all__)
