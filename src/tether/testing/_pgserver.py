"""A throwaway PostgreSQL server for tests and benchmarks: ``PostgresServer``.

It creates a cluster in a temporary directory with the server binaries on ``PATH`` (``initdb``,
``pg_ctl``), starts it on a free loopback port and removes everything on ``stop``. PostgreSQL
refuses to run as root; when the current user is root, the binaries run as the ``postgres`` user
(through ``runuser``) and the directory is handed to it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

SERVER_USER = "postgres"


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server binaries here (or no unprivileged user to run them as)."""


def postgres_unavailable() -> str | None:
    """Why a server cannot be started here, or ``None`` when it can."""
    for tool in ("initdb", "pg_ctl", "postgres"):
        if shutil.which(tool) is None:
            return f"the PostgreSQL server binary {tool!r} is not on PATH"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and 'runuser' is not available"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """A private PostgreSQL cluster; use as a context manager (or call ``start``/``stop``).

    ``dsn`` connects as the superuser ``tether`` (trust authentication, loopback only) to the
    database ``tether``.

    Args:
        settings: extra ``postgres -c`` settings, e.g. ``{"fsync": "off"}``.
    """

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "300",
            "shared_buffers": "64MB",
            **(settings or {}),
        }
        self.port = 0
        self.dir: Path | None = None
        self._as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"postgresql://tether@127.0.0.1:{self.port}/tether"

    @property
    def data_dir(self) -> Path:
        assert self.dir is not None, "the server is not started"
        return self.dir / "data"

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, *argv: str, timeout: float = 120) -> None:
        cmd = list(argv)
        if self._as_root:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            log = self._log_tail()
            raise RuntimeError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}\n{log}"
            )

    def _log_tail(self) -> str:
        if self.dir is None:
            return ""
        try:
            return (self.dir / "server.log").read_text()[-2000:]
        except OSError:
            return ""

    def start(self) -> None:
        """Create the cluster and start the server (waits until it accepts connections)."""
        reason = postgres_unavailable()
        if reason is not None:
            raise PostgresUnavailableError(reason)
        self.dir = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        if self._as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run(
            "initdb", "-D", str(self.data_dir), "-U", "tether", "--auth=trust",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        self.port = free_port()
        self._pg_ctl_start()
        self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tether", "-d", "postgres",
            "-qc", "CREATE DATABASE tether",
        )  # fmt: skip

    def _pg_ctl_start(self, **settings: str) -> None:
        assert self.dir is not None, "the server is not started"
        opts = " ".join(f"-c {k}={v}" for k, v in {**self.settings, **settings}.items())
        opts += f" -p {self.port} -k {self.dir}"
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.dir / "server.log"),
            "-o", opts, "-w", "-t", "60", "start",
        )  # fmt: skip

    def restart(self, *, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: like a crash, no checkpoint) and start it again."""
        self.kill(mode=mode)
        self._pg_ctl_start()

    def kill(self, *, mode: str = "immediate") -> None:
        """Stop the server without removing the cluster (``start_again`` brings it back)."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")

    def start_again(self) -> None:
        self._pg_ctl_start()

    def start_in_recovery(self) -> None:
        """Start the stopped server as a standby that stays in recovery, with hot standby off,
        so that every connection is refused with "the database system is not accepting
        connections" (SQLSTATE 57P03, as during crash recovery), until ``promote``."""
        signal_file = self.data_dir / "standby.signal"
        signal_file.touch()
        if self._as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(signal_file, user.pw_uid, user.pw_gid)
        self._pg_ctl_start(hot_standby="off")

    def password_role(self, name: str, password: str) -> str:
        """Create a login role that must give ``password`` (``scram-sha-256``, where every
        other role is trusted); return a DSN for it, without the password."""
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(f"host all {name} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tether", "-d", "tether",
            "-qc", f"CREATE ROLE {name} LOGIN SUPERUSER PASSWORD '{password}'",
        )  # fmt: skip
        self._run("pg_ctl", "-D", str(self.data_dir), "reload")
        probe = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", name, "-d", "tether",
                 "-w", "-qc", "SELECT 1"]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": password + "-not"}
        for _ in range(100):  # the reload takes effect a moment later
            if subprocess.run(probe, env=env, capture_output=True, check=False).returncode:
                break
            time.sleep(0.05)
        return f"postgresql://{name}@127.0.0.1:{self.port}/tether"

    def promote(self) -> None:
        """End the recovery ``start_in_recovery`` began: the server accepts connections (and
        writes) once this returns."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "promote")

    def stop(self) -> None:
        """Stop the server and remove the cluster. Idempotent."""
        if self.dir is None:
            return
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop", timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
