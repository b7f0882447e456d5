"""Two workers on one PostgreSQL database, on a throwaway server: ``python pg_trial.py``.

``tether.testing.PostgresServer`` starts a private PostgreSQL (``initdb`` and ``pg_ctl`` from
``PATH``) on a free port and removes it afterwards; point ``DSN`` at your own database instead.
"""

from __future__ import annotations

import signal
import subprocess

import anyio
from approval import build

import tether
from tether.testing import PostgresServer

TICKETS = ["pg-1", "pg-2", "pg-3"]


async def main(dsn: str) -> None:
    app = build()
    store = tether.PostgresStore(dsn)
    async with tether.Supervisor(store, model=app.model, tools=app.tools, resume=False) as sup:
        for run_id in TICKETS:
            await sup.start(run_id, "Ticket KITE-142 just came in.", drive=False)
        for run_id in TICKETS:  # a worker drives each until it waits for the approval
            await sup.wait(run_id, timeout=60)
            await sup.decide(run_id, "toolu_02", approved=True, by="priya")
        for run_id in TICKETS:
            with anyio.fail_after(60):
                # A decision given while a worker still held the run waits in its inbox, so
                # the run may rest as it was a moment longer: look again until it is done.
                status = await sup.wait(run_id)
                while status is tether.RunStatus.WAITING_FOR_APPROVAL:
                    await anyio.sleep(0.1)
                    status = await sup.wait(run_id)
            print(run_id, status.value)


with PostgresServer() as server:
    command = ["tether", "worker", "--store", server.dsn, "--app", "approval:build", "--quiet"]
    workers = [subprocess.Popen(command) for _ in range(2)]
    try:
        anyio.run(main, server.dsn)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)  # drain, then exit 0
        print("workers exited", [worker.wait(timeout=60) for worker in workers])
