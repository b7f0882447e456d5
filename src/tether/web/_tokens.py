"""Who may use the console: access tokens, each naming the person it stands for.

A token file (``--token-file``) or the ``TETHER_CONSOLE_TOKEN`` environment variable holds one
entry per line (or, in the variable, separated by commas): ``NAME:TOKEN``, such as
``priya:3q2x...``, where NAME is what the journal records as ``by`` for that person's answers.
A bare ``TOKEN`` stands for ``console``. Blank lines and lines starting with ``#`` are skipped.
Tokens are secrets: at least 16 characters, never logged or shown; ``secrets.token_urlsafe()``
makes good ones.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import select
import stat
import time
from collections.abc import Mapping

from .._errors import TetherError

ENV_TOKEN = "TETHER_CONSOLE_TOKEN"
MIN_TOKEN = 16
DEFAULT_IDENTITY = "console"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


log = logging.getLogger("tether.web")


class TokenError(TetherError, ValueError):
    """A token list that cannot be used (a short token, a bad name, none at all)."""


def load_tokens(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The console's tokens: from the file at ``path``, else from ``TETHER_CONSOLE_TOKEN``.

    Returns token -> identity, for ``tether.web.app(store, tokens=...)``. A file that others
    than its owner may read is used, with a warning.

    Raises:
        TokenError: no file and no variable, or entries that cannot be used (see
            ``parse_tokens``).
        OSError: the file cannot be read.
    """
    if path is not None:
        mode, data = _read_token_file(os.fspath(path))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TokenError(
                f"{os.fspath(path)}: not UTF-8 text (byte {exc.start}); a token file is lines of "
                "NAME:TOKEN"
            ) from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("%s can be read by others than its owner: chmod 600 it", os.fspath(path))
        return parse_tokens(text, source=os.fspath(path))
    env = os.environ if environ is None else environ
    value = env.get(ENV_TOKEN)
    if not value:
        raise TokenError(f"no tokens: give --token-file FILE or set {ENV_TOKEN}")
    return parse_tokens(value, source=ENV_TOKEN)


READ_WAIT = 10.0
"""Seconds a pipe given as the token file (``--token-file <(pass show ...)``) may take to say
all it has."""


def _read_token_file(path: str) -> tuple[int, bytes]:
    """The token file's mode and bytes: a regular file, or a pipe read to its end within
    ``READ_WAIT`` (opened without waiting, so a FIFO nobody writes to cannot block the start).

    Raises:
        TokenError: neither a regular file nor a pipe, or a pipe that did not end in time.
        OSError: it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            with open(fd, "rb", closefd=False) as f:
                return mode, f.read()
        if not stat.S_ISFIFO(mode):
            raise TokenError(f"{path}: not a regular file or a pipe")
        chunks: list[bytes] = []
        deadline = time.monotonic() + READ_WAIT
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TokenError(f"{path}: a pipe that said nothing more in {READ_WAIT:g} s")
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:  # its end (or no writer at all: nothing in it)
                return mode, b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def parse_tokens(text: str, *, source: str) -> dict[str, str]:
    """The tokens in ``text`` (see the module's docstring), each mapped to its identity.

    Raises:
        TokenError: an entry is malformed, a token is shorter than 16 characters or given
            twice, or there is none; the message names ``source`` and the line, never a token.
    """
    tokens: dict[str, str] = {}
    entries = [e for line in text.splitlines() for e in line.split(",")]
    for number, raw in enumerate(entries, 1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        name, sep, token = entry.partition(":")
        if not sep:
            name, token = DEFAULT_IDENTITY, entry
        name, token = name.strip(), token.strip()
        if not _NAME.fullmatch(name):
            raise TokenError(
                f"{source}, entry {number}: {name!r} is not a name (letters, digits and ._@-, "
                "at most 64)"
            )
        if len(token) < MIN_TOKEN:
            raise TokenError(
                f"{source}, entry {number} ({name}): the token is shorter than {MIN_TOKEN} "
                "characters"
            )
        if token in tokens:
            raise TokenError(f"{source}, entry {number} ({name}): this token is given twice")
        tokens[token] = name
    if not tokens:
        raise TokenError(f"{source} holds no token")
    return tokens


def identity_of(tokens: Mapping[str, str], given: str) -> str | None:
    """The identity ``given`` is the token of, or ``None``.

    Every token is compared in constant time, so the time taken says nothing of how much of a
    guess was right.
    """
    found: str | None = None
    candidate = given.encode()
    for token, name in tokens.items():
        if hmac.compare_digest(token.encode(), candidate):
            found = name
    return found
