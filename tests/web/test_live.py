"""Summaries are read again only for runs that changed; a real server streams the changes."""

from __future__ import annotations

import json
import os
import time

import anyio
import httpx2
import pytest
import uvicorn

import tether.web
from tether.journal import Signal
from tether.testing._pgserver import free_port
from tether.web._listing import RACY_NS, Listing

from ..cli._stores import APPROVE, DONE, REFUND_CALL, Env
from ._envs import TOKENS, auth


async def test_a_listing_reads_only_the_runs_that_changed(env: Env) -> None:
    async with env.store() as store:
        listing = Listing(store, fresh_for=0)
        first = await listing.summaries()
        assert len(first) == 4
        await anyio.sleep(2 * RACY_NS / 1e9)  # past the window in which a version is not trusted
        await listing.summaries()  # the runs written just before the first look, once more
        reads = listing.reads
        again = await listing.summaries()
        assert listing.reads == reads  # nothing changed: nothing read
        assert [s.status for s in again] == [s.status for s in first]
        journal = await store.open(APPROVE)
        async with journal:
            await journal.append([Signal(name="x", signal_id="s1")])
        changed = await listing.summaries()
        assert listing.reads == reads + 1
        (run,) = [s for s in changed if s.run_id == APPROVE]
        assert run.events == next(s for s in first if s.run_id == APPROVE).events + 1


async def test_a_journal_written_in_the_same_clock_tick_is_read_again(file_env: Env) -> None:
    """Two appends within one tick of the kernel's clock leave the same (size, mtime): the
    summary read between them must not be kept as final. Time is the subject: the listing's
    clock is moved by hand, and the journal's mtime set to match it."""
    store = file_env.store()
    now = [time.time() + 10.0]
    listing = Listing(store, clock=lambda: now[0], fresh_for=0)
    path = store.location(DONE)
    await listing.summaries()
    await listing.summaries()
    reads = listing.reads
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, int(now[0] * 1e9)))  # a write, as the kernel dates it
    await listing.summaries()  # the version changed: read; its mtime is now: not trusted yet
    await listing.summaries()  # so read again, though the version is the same
    assert listing.reads == reads + 2
    now[0] += 2 * RACY_NS / 1e9
    await listing.summaries()
    await listing.summaries()
    assert listing.reads == reads + 3  # once past the window, it is trusted


@pytest.mark.timeout(60)
async def test_the_event_stream_says_which_run_changed(env: Env) -> None:
    async with env.store() as store:
        application = tether.web.app(store, tokens=TOKENS, poll_interval=0.05)
        port = free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        base = f"http://127.0.0.1:{port}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            try:
                with anyio.fail_after(20):
                    while not server.started:
                        await anyio.sleep(0.02)
                    async with (
                        httpx2.AsyncClient(base_url=base, timeout=20) as client,
                        client.stream("GET", "/api/events", headers=auth()) as stream,
                    ):
                        assert stream.status_code == 200
                        assert stream.headers["content-type"].startswith("text/event-stream")
                        lines = stream.aiter_lines()
                        async for line in lines:
                            if line.startswith("id: "):
                                break  # the first look: where things stand
                        answer = await client.post(
                            f"/api/runs/{APPROVE}/calls/{REFUND_CALL}/approve",
                            json={},
                            headers=auth(),
                        )
                        assert answer.status_code == 200
                        event = None
                        async for line in lines:
                            if line == "event: change":
                                event = "change"
                            elif event == "change" and line.startswith("data: "):
                                data = json.loads(line.removeprefix("data: "))
                                break
                assert data["changed"] == [APPROVE]
                assert data["counts"]["waiting_for_approval"] == 0
            finally:
                server.should_exit = True
