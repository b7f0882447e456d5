"""``tether serve --root DIR|--store URL``: the web console, served by uvicorn.

Signing in takes one of the console's tokens (``--token-file``, else ``TETHER_CONSOLE_TOKEN``),
which names the person whose answers are recorded; ``--no-auth`` (no sign-in at all) is only
for a console bound to a loopback address. See ``tether.web``.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import logging
import sys
from typing import Any

import anyio

from ._input import port, seconds, text
from ._view import (
    StoreMissingError,
    add_store_options,
    check_store_usage,
    open_store,
    store_failure,
    store_label,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_serve_command(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve the web console: runs, timelines, the approval inbox",
        description="Serve the web console over the store until SIGTERM or SIGINT: every run "
        "with its status and what it waits for, a run's timeline, and an inbox of the calls "
        "waiting for a person, which can be approved, rejected or resolved there (and runs "
        "retried, cancelled or signalled), with a JSON API for the same (/api, described at "
        "/api/openapi.json). People sign in with an access token: --token-file FILE, else the "
        "TETHER_CONSOLE_TOKEN environment variable, one NAME:TOKEN entry per line (commas in "
        "the variable), NAME being who the journal records as deciding. Binds to 127.0.0.1 "
        "unless --host says otherwise. Exit 0 on SIGTERM or SIGINT (requests in flight finish); "
        "2 on bad usage (no tokens, --no-auth on an address other hosts can reach); 3 if the "
        "port cannot be bound (in use), the store cannot be reached or the web extra is "
        "missing.",
    )
    add_store_options(serve)
    serve.add_argument(
        "--host", type=text, default=DEFAULT_HOST, help=f"address to bind (default: {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"port to bind (default: {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="the access tokens, one NAME:TOKEN a line (default: the TETHER_CONSOLE_TOKEN "
        "environment variable)",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="no sign-in: anyone who can reach the port acts as the current user; allowed only "
        "with a loopback --host (127.0.0.1, ::1)",
    )
    serve.add_argument(
        "--poll-interval",
        metavar="SECONDS",
        type=seconds,
        default=1.0,
        help="seconds between looks at the store for live updates (default: 1)",
    )
    serve.add_argument(
        "--header-timeout",
        metavar="SECONDS",
        type=seconds,
        default=10.0,
        help="seconds a client has to send a request's headers, however slowly it sends them; "
        "then the connection is closed (default: 10)",
    )
    serve.set_defaults(handler=_serve, parser=serve)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    check_store_usage(args)
    try:
        from .. import web
        from ..web._serving import listen, serve
    except ImportError as exc:
        print(
            f"tether: the console needs the web extra (pip install 'tether[web]'): {exc}",
            file=sys.stderr,
        )
        return 3
    tokens: dict[str, str] | None = None
    anonymous: str | None = None
    if args.no_auth:
        if args.token_file is not None:
            args.parser.error("--no-auth and --token-file exclude each other")
        if not _loopback(args.host):
            args.parser.error(
                f"--no-auth only with a loopback --host (127.0.0.1 or ::1), not {args.host}: "
                "anyone who can reach the port could approve a refund"
            )
        anonymous = getpass.getuser()
        print(
            f"tether: warning: no authentication: anyone who can connect to {args.host}:"
            f"{args.port} acts as {anonymous}",
            file=sys.stderr,
        )
    else:
        try:
            tokens = web.load_tokens(args.token_file)
        except web.TokenError as exc:
            args.parser.error(str(exc))
        except OSError as exc:
            print(f"tether: {args.token_file}: {exc.strerror or exc}", file=sys.stderr)
            return 3
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        print(
            f"tether: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 3

    def listening(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"serving the console of {store_label(args)} at http://{shown}:{port}/",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> bool:
        store = open_store(args)
        application = web.app(
            store, tokens=tokens, anonymous=anonymous, poll_interval=args.poll_interval
        )
        return await serve(
            application,
            sock,
            header_timeout=args.header_timeout,
            on_listening=listening,
            log_level="warning",
            access_log=False,
        )

    try:
        with sock:
            started = anyio.run(main)
    except Exception as exc:
        problem = str(exc) if isinstance(exc, StoreMissingError) else store_failure(args, exc)
        if problem is None:
            raise
        print(f"tether: {problem}", file=sys.stderr)
        return 3
    if not started:
        print("tether: the console did not start (see the error above)", file=sys.stderr)
        return 3
    return 0
