"""Starting, watching and killing the test MCP server (``_server.py``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from tether.mcp import MCPServer
from tether.supervisor import RunStatus, Supervisor

SERVER = Path(__file__).with_name("_server.py")
WAIT = 20.0


def stdio_server(world: Path, **options: Any) -> MCPServer:
    """The test server, started over stdio on first use, keeping its files in ``world``."""
    world.mkdir(parents=True, exist_ok=True)
    return MCPServer(
        "helpdesk",
        command=[sys.executable, str(SERVER), "stdio"],
        env={"MCP_TEST_DIR": str(world)},
        **options,
    )


def ledger(world: Path) -> list[str]:
    try:
        return (world / "ledger").read_text().splitlines()
    except FileNotFoundError:
        return []


async def until_in_ledger(world: Path, line: str, count: int = 1) -> None:
    """Wait until ``line`` is in the ledger ``count`` times (the server is inside the call)."""
    with anyio.fail_after(WAIT):
        while ledger(world).count(line) < count:
            await anyio.sleep(0.02)


async def until_status(sup: Supervisor, run_id: str, want: RunStatus, words: str = "") -> str:
    """Wait until the run's status is ``want`` (with ``words`` in its reason): its reason.

    Not ``sup.wait``: a run that waits for an unreachable server rests (``sleeping``) between
    tries, and a test of it waits for what comes after."""
    with anyio.fail_after(WAIT):
        while True:
            view = await sup.inspect(run_id)
            if view.status is want and words in view.reason:
                return view.reason
            await anyio.sleep(0.02)


def kill_server(world: Path) -> None:
    """SIGKILL the latest server process."""
    os.kill(int((world / "pid").read_text()), signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def http_server(world: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The test server on streamable HTTP at 127.0.0.1:``port``, until the block ends."""
    world.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**os.environ, "MCP_TEST_DIR": str(world)},
    )
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the HTTP server did not listen on {port} in time")
