"""Run a ``tether`` command as another user: ``python -m tests.cli._as_user USER ARGV...``.

Started as root, it loads everything the command needs first (the interpreter and its library
live where only root may look), then gives up root for ``USER`` and runs the command, so that
files the store's modes keep from that user are refused by the OS as they would be in real use.
"""

from __future__ import annotations

import encodings.ascii  # noqa: F401 - looked up by name when a file is opened as text
import os
import pwd
import sys

import anyio

import tether.cli


async def _warm_up() -> None:
    await anyio.to_thread.run_sync(lambda: None)  # imports the backend and its thread pool


def main() -> int:
    user, argv = sys.argv[1], sys.argv[2:]
    tether.cli.build_parser()  # every command's module, and what argparse imports as it goes
    anyio.run(_warm_up)
    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    return tether.cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
