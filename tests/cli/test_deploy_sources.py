"""``tether check --app`` and ``tether repin --app`` for an application whose tools come from
a tool source (an MCP server): they open the sources as a worker does, so the server's tools
are checked and repinned like local ones."""

from __future__ import annotations

import json
import pathlib
import sys

import anyio
import pytest

from tether.cli import main
from tether.journal import FileStore, Repinned
from tether.supervisor import RunStatus, Supervisor

from .._cli import run_tether
from ..mcp._helpers import SERVER
from ..supervisor._worker_proc import lines, start, stop, until
from . import _mcp_app

RUN = "run-mcp"
APP = "tests.cli._mcp_app:app"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def world(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    world = tmp_path / "world"
    monkeypatch.setenv("MCP_APP_WORLD", str(world))
    monkeypatch.delenv("MCP_APP_COMMAND", raising=False)
    return world


async def _start(root: pathlib.Path) -> None:
    """A run that pinned the server's tools, looked a ticket up and waits for the approval
    of its reply."""
    built = _mcp_app.app()
    async with Supervisor(FileStore(root), model=built.model, tools=built.tools) as sup:
        await sup.start(RUN, "look K-1 up")
        assert await sup.wait(RUN, timeout=20) is RunStatus.WAITING_FOR_APPROVAL


def test_check_and_repin_see_the_tools_of_an_mcp_server(
    world: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    anyio.run(_start, root)
    checked = run_tether("check", "--root", str(root), "--app", APP)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "is not registered" not in checked.stdout
    assert f"{RUN}: continues" in checked.stdout
    # The server is redeployed with a changed schema for lookup (which the run called): the
    # run would stop on it, and a person accepts the new one.
    (world / "variant").write_text("v2")
    checked = run_tether("check", "--root", str(root), "--app", APP)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "lookup" in checked.stdout
    assert "send_reply" not in checked.stdout  # unchanged: not reported
    repinned = run_tether("repin", "--root", str(root), "--app", APP, "--by", "priya", RUN)
    assert repinned.returncode == 0, repinned.stdout + repinned.stderr
    assert "recorded: repin of run" in repinned.stdout
    (last,) = [e for e in anyio.run(FileStore(root).read, RUN) if isinstance(e, Repinned)]
    assert [pin.name for pin in last.tools] == ["lookup"]
    assert run_tether("check", "--root", str(root), "--app", APP).returncode == 0
    # A server that cannot be started: the application's tools cannot be known, exit 3.
    monkeypatch.setenv("MCP_APP_COMMAND", json.dumps([sys.executable, str(tmp_path / "gone.py")]))
    for argv in (("check",), ("repin", "--by", "priya", RUN)):
        failed = run_tether(*argv[:1], "--root", str(root), "--app", APP, *argv[1:])
        assert failed.returncode == 3, failed.stdout + failed.stderr
        assert f"tether: cannot open the tool sources of {APP}: " in failed.stderr
        assert "MCP server 'helpdesk'" in failed.stderr
        assert "Traceback" not in failed.stderr


def test_a_worker_waits_for_an_mcp_server_that_is_not_up_yet(
    world: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A fleet restarted together with its MCP server: the worker tries again, saying what
    it waits for, and serves once the server starts (it exited 1 with a traceback)."""
    late = tmp_path / "late_server.py"  # not there yet: the server's command fails
    world.mkdir(parents=True, exist_ok=True)
    command = json.dumps([sys.executable, str(late)])
    log = tmp_path / "worker.log"
    proc = start(
        ["--root", str(tmp_path / "store"), "--app", APP], log=log, env={"MCP_APP_COMMAND": command}
    )
    try:
        until(lambda: "waiting for the tool sources" in log.read_text(), "a wait", running=proc)
        assert "MCP server 'helpdesk'" in log.read_text()
        late.write_text(
            "import os, sys\n"
            f"os.environ['MCP_TEST_DIR'] = {str(world)!r}\n"
            f"os.execv(sys.executable, [sys.executable, {str(SERVER)!r}, 'stdio'])\n"
        )
        until(lambda: any(": serving " in line for line in lines(log)), "serving", running=proc)
    finally:
        code = stop(proc)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_a_worker_gives_up_on_an_mcp_server_with_one_line_and_exit_3(
    world: pathlib.Path,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MCP_APP_COMMAND", json.dumps([sys.executable, str(tmp_path / "gone.py")]))
    monkeypatch.setattr("tether.supervisor._worker.SOURCES_WAIT", 0.5)
    monkeypatch.setattr("tether.supervisor._worker.tune_collector", lambda: None)
    assert main(["worker", "--root", str(tmp_path / "store"), "--app", APP]) == 3
    err = capsys.readouterr().err
    assert f"tether: {APP}: the tool sources cannot be opened (still after waiting 0.5 s): " in err
    assert "MCP server 'helpdesk'" in err
    assert "Traceback" not in err
