"""``tether serve`` as a process: a clean exit on SIGTERM, one line for a port in use, and no
connection held open by a client that trickles its headers in."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2
import pytest

from tether.testing._pgserver import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]


def _serve(root: pathlib.Path, port: int, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "serve", "--root", str(root), "--no-auth",
         "--port", str(port), *more],
        cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _up(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/api/runs", timeout=2).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "tether serve did not start"
        time.sleep(0.05)


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    (tmp_path / "store").mkdir()
    port = free_port()
    proc = _serve(tmp_path / "store", port, "--header-timeout", "1")
    try:
        _up(port, proc)
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_sigterm_ends_serve_with_exit_0_and_no_traceback(
    served: tuple[int, subprocess.Popen[str]],
) -> None:
    _port, proc = served
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_port_in_use_is_one_line_and_exit_3(
    served: tuple[int, subprocess.Popen[str]], tmp_path: pathlib.Path
) -> None:
    port, _proc = served
    second = _serve(tmp_path / "store", port)
    _out, err = second.communicate(timeout=60)
    assert second.returncode == 3
    assert f"tether: cannot listen on 127.0.0.1:{port}: Address already in use" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 2  # the --no-auth warning, then this


@pytest.mark.slow
def test_connections_that_trickle_their_headers_are_closed(
    served: tuple[int, subprocess.Popen[str]],
) -> None:
    port, _proc = served
    slow = []
    for _ in range(300):
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow.append(conn)
    try:
        deadline = time.monotonic() + 4  # each sends a byte now and then, never the last line
        while time.monotonic() < deadline:
            for conn in slow:
                with contextlib.suppress(OSError):
                    conn.sendall(b"X")
            # A client that sends its request whole is answered meanwhile.
            assert httpx2.get(f"http://127.0.0.1:{port}/api/runs", timeout=5).status_code == 200
            time.sleep(0.3)
        closed = 0
        for conn in slow:
            conn.settimeout(5)
            try:
                closed += conn.recv(1024) == b""
            except ConnectionResetError:
                closed += 1
        assert closed == len(slow)
    finally:
        for conn in slow:
            conn.close()
