"""A worker process on a PostgresStore, for multi-process tests: the ledger app of
``tests.supervisor._ledger_app``, served until SIGTERM.

``python -m tests.postgres._pg_worker DSN SCHEMA [--lease-ttl S] [--clock-offset S]
[--max-active N]``. ``--clock-offset`` moves this process's wall clock (``time.time``) by that
many seconds before tether is imported, as a badly set machine clock would.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("schema")
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--clock-offset", type=float, default=0.0)
    parser.add_argument("--max-active", type=int, default=4)
    args = parser.parse_args()
    if args.clock_offset:
        real = time.time
        time.time = lambda: real() + args.clock_offset

    import logging
    import signal

    import anyio

    from tether.postgres import PostgresStore
    from tether.supervisor import Supervisor

    from ..supervisor import _ledger_app

    logging.basicConfig(level=logging.INFO, format="%(process)d %(levelname)s %(message)s")

    async def serve() -> None:
        store = PostgresStore(args.dsn, schema=args.schema, lease_ttl=args.lease_ttl)
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async with Supervisor(
                store,
                model=_ledger_app.make_model(),
                tools=_ledger_app.tools,
                sweep_interval=0.1,
                restart_backoff=0.01,
                max_active_runs=args.max_active,
            ):
                print("ready", flush=True)
                async for _ in signals:
                    return

    anyio.run(serve)


if __name__ == "__main__":
    main()
