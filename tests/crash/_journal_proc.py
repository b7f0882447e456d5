"""A child process for the crash tests: ``python _journal_proc.py MODE ROOT RUN_ID [SEED]``.

Modes:

``append``
    Wait for a line on stdin (so that the parent can start the interpreter ahead of time),
    open the journal, print ``open <next_seq>``, then append forever: one group at a time, or
    from several tasks at once (their groups may share one write), mixing one-event and
    multi-event groups of varied sizes. After each append returns, print
    ``ack <first_seq> <last_seq> <token>``; every event of that append has ``call_id``
    ``<token>:<i>``.
``hold``
    Open the journal, print ``open <next_seq>`` and sleep until killed.
``try``
    Try to open the journal once; print ``locked`` or ``open <next_seq>`` and exit.
``create``
    Wait for a line on stdin, then create runs ``<RUN_ID>-<SEED>-<n>`` forever, each with two
    first events (a ``RunStarted`` and a ``ToolResult`` whose ``call_id`` is the run id), and
    close each one; print ``created <run_id>`` once ``create`` has returned.

Every line is flushed at once, so a line the parent reads was written after the fact it reports.
"""

from __future__ import annotations

import random
import sys
import time

import anyio

from tether import JournalLockedError
from tether.journal import (
    Event,
    FileJournal,
    FileStore,
    Manifest,
    ModelResponse,
    RunStarted,
    ToolResult,
    ToolStarted,
)

LOCK_WAIT_S = 5.0


async def open_when_free(store: FileStore, run_id: str) -> FileJournal:
    """Open ``run_id``, waiting up to ``LOCK_WAIT_S`` for a killed writer's lock to go.

    The writer before this one was killed with SIGKILL and reaped a moment ago. Appending
    through io_uring, it can leave requests in flight: the kernel tears the ring down after
    the process is gone, and those requests hold the file, and so its ``flock``, until then.
    Measured here: the lock outlived the reaped process in 7 of 30 kills, for 4-8 ms; never
    with the writer threads. A supervisor meets the same as a locked journal and takes the run
    at its next sweep; this test takes it as soon as it is free.
    """
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return await store.open(run_id)
        except JournalLockedError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.005)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def make_events(rng: random.Random, token: str) -> list[Event]:
    n = rng.choice((1, 1, 1, 2, 3, 5, 8))
    events: list[Event] = []
    for i in range(n):
        r = rng.random()
        if r < 0.75:
            size = rng.randint(0, 300)
        elif r < 0.97:
            size = rng.randint(300, 8000)
        elif r < 0.995:
            size = rng.randint(60_000, 120_000)  # groups this large extend the file exactly
        else:
            size = rng.randint(300_000, 1_000_000)  # a long pwrite, which a kill may tear
        text = rng.choice("abcdefgh") * size
        call_id = f"{token}:{i}"
        kind = rng.randrange(3)
        if kind == 0:
            events.append(ToolStarted(call_id=call_id, name=text))
        elif kind == 1:
            events.append(ToolResult(call_id=call_id, ok=True, content=text))
        else:
            # ModelResponse has no call_id field: the message carries it.
            events.append(ModelResponse(message={"call_id": call_id, "text": text}))
    return events


async def appender(journal: FileJournal, rng: random.Random, name: str) -> None:
    n = 0
    while True:
        token = f"{name}-{n}"
        n += 1
        stamped = await journal.append(make_events(rng, token))
        say(f"ack {stamped[0].seq} {stamped[-1].seq} {token}")


async def creator(store: FileStore, prefix: str) -> None:
    n = 0
    while True:
        run_id = f"{prefix}-{n}"
        n += 1
        first: list[Event] = [
            RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[]),
            ToolResult(call_id=run_id, ok=True, content="x" * (n % 5000)),
        ]
        journal = await store.create(run_id, first)
        say(f"created {run_id}")
        await journal.aclose()


async def main(mode: str, root: str, run_id: str, seed: int) -> None:
    async with FileStore(root, redact=None, blob_threshold=1 << 30, sync_threads=2) as store:
        if mode == "try":
            try:
                journal = await store.open(run_id)
            except JournalLockedError:
                say("locked")
                return
            say(f"open {journal.next_seq}")
            await journal.aclose()
            return
        if mode in ("append", "create"):
            await anyio.to_thread.run_sync(sys.stdin.readline)
        if mode == "create":
            await creator(store, f"{run_id}-{seed}")
            return
        journal = await open_when_free(store, run_id)
        say(f"open {journal.next_seq}")
        if mode == "hold":
            await anyio.sleep_forever()
        rng = random.Random(seed)
        tasks = rng.choice((1, 1, 2, 3))
        async with anyio.create_task_group() as tg:
            for t in range(tasks):
                tg.start_soon(appender, journal, random.Random(rng.random()), f"s{seed}t{t}")


if __name__ == "__main__":
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], seed)
