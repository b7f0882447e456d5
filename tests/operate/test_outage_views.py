"""A run that waits for its tool's service says so in every view, as ``run_status`` reads it
from the journal: ``tether runs`` (and ``--json``), ``tether show`` (and ``--json``), the
console's page and its API. Before, such a run showed nothing of the outage: its tool's
retries ran out in about two seconds and the model was handed an error result.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import anyio
import httpx2

import tether.web
from tether.journal import FileStore, ToolFailed
from tether.supervisor import RunStatus, Supervisor
from tether.testing import VirtualClock

from .._cli import run_tether
from ..web._envs import PRIYA, TOKENS, auth

RUN = "run-docs"
PAUSES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
"""The waits before the run's seventh try (jitter 0.5: each its base), which waits 60 s."""


def _script() -> tether.ScriptedModel:
    use = tether.ScriptedModel.tool_use
    return tether.ScriptedModel(
        [[use("toolu_1", "search", {"query": "leases"})], "the docs are gone"]
    )


def _half() -> float:
    return 0.5


async def _resting(root: pathlib.Path) -> None:
    """The run as a supervisor leaves it after seven tries of a service that is down: resting
    for a minute, its last try dated now (its clock started that long ago)."""
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def search(query: str, ctx: tether.ToolContext) -> str:
        """Search the docs."""
        raise tether.ToolUnavailableError("search", "connection refused", attempt=ctx)

    model = _script()
    clock = VirtualClock(start=time.time() - sum(PAUSES))
    async with Supervisor(
        FileStore(root), model=model, tools=tools, clock=clock, jitter=_half
    ) as sup:
        await sup.start(RUN, "find the docs on leases")
        for tries in range(1, len(PAUSES) + 2):
            tried = "(tried once)" if tries == 1 else f"(tried {tries} times in a row)"
            with anyio.fail_after(10):  # at rest after this try, its timer set
                while tried not in (await sup.inspect(RUN)).reason or not clock.sleepers:
                    await anyio.sleep(0.005)
            await anyio.wait_all_tasks_blocked()
            if tries <= len(PAUSES):
                clock.advance(PAUSES[tries - 1])
        assert (await sup.inspect(RUN)).status is RunStatus.SLEEPING


async def _console(root: pathlib.Path) -> tuple[str, dict[str, Any]]:
    async with FileStore(root) as store:
        app = tether.web.app(store, tokens=TOKENS)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://console.test") as c:
            page = (await c.get(f"/runs/{RUN}", headers=auth(PRIYA))).text
            api = (await c.get(f"/api/runs/{RUN}", headers=auth(PRIYA))).json()
    return page, api


async def _failures(root: pathlib.Path) -> list[ToolFailed]:
    async with FileStore(root) as store:
        return [e for e in await store.read(RUN) if isinstance(e, ToolFailed)]


def test_a_run_waiting_for_its_service_says_why_in_every_view(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    anyio.run(_resting, root)
    failures = anyio.run(_failures, root)
    assert [f.unsent for f in failures] == [True] * 7
    last = failures[-1]
    assert last.retry_at is not None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last.retry_at))
    reason = (
        "search (toolu_1) waiting for its service: tool 'search': connection refused; nothing "
        f"was sent (tried 7 times in a row); next try at {when}"
        "; resolve it to give the model a result, or cancel the run"
    )

    where = ("--root", str(root))
    runs = run_tether("runs", *where).stdout
    (line,) = [ln for ln in runs.splitlines() if ln.startswith(RUN)]
    assert "sleeping" in line
    assert "waiting for its service" in line
    (listed,) = json.loads(run_tether("runs", *where, "--json").stdout)
    shown = run_tether("show", *where, RUN).stdout
    shown_json = json.loads(run_tether("show", *where, RUN, "--json").stdout)["summary"]
    page, api = anyio.run(_console, root)
    for view in (listed, shown_json, api["summary"]):
        assert (view["status"], view["reason"]) == ("sleeping", reason)
        assert view["tool_calls"] == 0  # nothing reached the service: no tool call spent
    assert shown.startswith(f"run {RUN}: sleeping ({reason}")
    rest = {"call_id": "toolu_1", "tool": "search", "awaiting": "service"}
    for view in (listed, shown_json, api["summary"]):
        (waits,) = view["waiting"]
        assert {k: waits[k] for k in rest} == rest
        assert waits["until"] == last.retry_at
    hint = f"tether resolve --root {root} {RUN} toolu_1 --outcome succeeded|failed"
    assert f"{hint} [--result JSON] --by NAME" in shown
    assert f"/runs/{RUN}/calls/toolu_1/resolve" in page
    # Its form gives a result in place of the service's answer: no "retry" (it is tried again
    # on its own), no "it happened" (nothing was sent).
    section = page.split('<section class="waiting" data-call="toolu_1">', 1)[1]
    section = section.split("</section>", 1)[0]
    assert "give the model this result" in section
    assert "it failed" in section
    assert 'value="retry"' not in section
    assert "it happened" not in section
    assert "attempt 7 not sent (its service could not be reached)" in shown
    assert "sleeping" in page
    assert "waiting for its service" in page


def test_tether_resolve_gives_a_run_waiting_for_its_service_a_result(
    tmp_path: pathlib.Path,
) -> None:
    """The service will not come back: ``tether resolve --outcome failed`` gives the model
    its error result, and the next supervisor carries the run on to done without trying
    the service again."""
    root = tmp_path / "store"
    anyio.run(_resting, root)
    where = ("--root", str(root))
    retry = run_tether("resolve", *where, RUN, "toolu_1", "--outcome", "retry", "--by", "priya")
    assert retry.returncode == 1
    assert "tried again on its own" in retry.stderr
    done = run_tether(
        "resolve", *where, RUN, "toolu_1", "--outcome", "failed", "--by", "priya",
        "--note", "the docs server is retired",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(run_tether("show", *where, RUN, "--json").stdout)["summary"]
    assert shown["status"] == "running"  # work to do: record the result, ask the model
    anyio.run(_carry_on, root)
    final = json.loads(run_tether("show", *where, RUN, "--json").stdout)["summary"]
    assert (final["status"], final["final_text"]) == ("done", "the docs are gone")


async def _carry_on(root: pathlib.Path) -> None:
    tools = tether.ToolRegistry()

    @tools.tool(policy="rerun")
    async def search(query: str) -> str:
        """Search the docs."""
        raise AssertionError("the service was tried after a person resolved the call")

    async with Supervisor(FileStore(root), model=_script(), tools=tools) as sup:
        assert await sup.wait(RUN, timeout=10) is RunStatus.DONE
