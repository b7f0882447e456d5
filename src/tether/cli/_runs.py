"""``tether runs`` and ``tether show``: what the runs of a store are doing, from their journals.

The commands that change runs (approve, reject, resolve, retry, signal, cancel) are ``_ops``'s,
``gc`` is ``_gc``'s.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from typing import Any

import msgspec

from ..operate import as_tree, describe, load_summary
from ..operate._display import Listing, format_age, parked_action, printable, shorten
from ..supervisor import RunStatus
from ._view import (
    add_store_options,
    execute,
    open_store,
    store_flags,
    store_label,
    table,
    using,
)

STATUSES = [s.value for s in RunStatus]

STATUS_HELP = (
    "Statuses come from the journal alone: 'running' (a process is advancing it, or it waits "
    "for a supervisor to pick it up), 'waiting_for_approval' (parked: a tool call of the "
    "current turn was never started and has no decision; approve or reject it), "
    "'sleeping' (parked: a call sleeps, waits for an event or for a child run; deliver an "
    "event with signal), 'needs_attention' (parked: a call is escalated, answer it with "
    "resolve; or the runtime parked the run, send it on with retry), and the final 'done', "
    "'failed', 'cancelled'."
)

STORE_HELP = (
    " The store is a directory (--root DIR) or a PostgreSQL database (--store "
    "postgresql://USER@HOST/DBNAME, with --schema if not 'tether'); a run a worker holds "
    "(a journal's lock, or a live lease in PostgreSQL) shows as 'running', held by its pid or "
    "worker."
)


def add_run_commands(commands: Any) -> None:
    runs = commands.add_parser(
        "runs",
        help="list the runs of a store with their status and what they wait for",
        description="List every run of the store, one line each: run id, status, age (since "
        "run_started), model calls, tool calls, restarts, and what it waits for (call id and "
        "tool name, awaiting approval or resolution) or why it needs attention or failed. "
        + STATUS_HELP
        + STORE_HELP
        + " A run whose journal cannot be read (damaged, or refused by the OS), and an entry "
        "of runs/ named like a journal that is not a regular file (a directory, a FIFO), is "
        "listed as needs_attention with the reason, and the other runs as usual. A directory "
        "store's finished runs are summarized once: their summaries are kept in "
        "DIR/summaries.cache (shared with the console, written where this command may write) "
        "and used while their journals stay exactly the same. Exit 0; 3 if the store cannot "
        "be read or reached.",
    )
    add_store_options(runs)
    runs.add_argument("--json", action="store_true", help="print a JSON list of run objects")
    runs.add_argument(
        "--status",
        metavar="S",
        action="append",
        choices=STATUSES,
        help="only runs with this status (repeat for several): " + ", ".join(STATUSES),
    )
    runs.set_defaults(handler=_runs)

    show = commands.add_parser(
        "show",
        help="print one run's timeline",
        description="Print one run's summary and its timeline: every event with its seq, "
        "time, type and a short description (what the model asked for, tool results "
        "shortened, decisions, escalations and resolutions, restarts with host and pid, how "
        "it finished). Reads the journal without its lock (or lease)." + STORE_HELP + " Exit 1 "
        "if there is no such run or its journal is corrupt, 3 if it cannot be read or the "
        "store cannot be reached.",
    )
    add_store_options(show)
    show.add_argument("run", metavar="RUN", help="the run id")
    show.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the summary and every event (raw fields plus 'text')",
    )
    show.set_defaults(handler=_show)


def _runs(args: argparse.Namespace) -> int:
    async def command() -> int:
        async with using(open_store(args), write=False) as store:
            # The console's listing: a finished run already summarized (by this command or
            # the console) is not read again while its journal stays the same.
            summaries = sorted(await Listing(store).summaries(), key=lambda s: s.run_id)
        if args.status:
            summaries = [s for s in summaries if s.status in args.status]
        now = time.time()
        if args.json:
            print(json.dumps([s.as_dict(now) for s in summaries], indent=2))
            return 0
        if not summaries:
            print("no runs" + (" with that status" if args.status else f" in {store_label(args)}"))
            return 0
        rows = [["RUN", "STATUS", "AGE", "MODEL", "TOOLS", "RESTARTS", "WAITING / REASON"]]
        for depth, s in as_tree(summaries):  # a child run under its parent, indented
            rows.append(
                [
                    "  " * depth + s.run_id,
                    s.status,
                    format_age(s.age(now)),
                    str(s.model_calls),
                    str(s.tool_calls),
                    str(s.restarts),
                    shorten(s.detail(), 100),
                ]
            )
        print("\n".join(table(rows)))
        return 0

    return execute(args, command)


def _show(args: argparse.Namespace) -> int:
    async def command() -> int:
        async with using(open_store(args), write=False) as store:
            events, summary = await load_summary(store, args.run)
        now = time.time()
        names: dict[str, str] = {}
        lines = [describe(e, names) for e in events]
        if args.json:
            out = {
                "summary": summary.as_dict(now),
                "events": [
                    {**msgspec.to_builtins(e), "text": text}
                    for e, text in zip(events, lines, strict=True)
                ],
            }
            print(json.dumps(out, indent=2, default=str))
            return 0 if summary.readable else 1
        detail = summary.detail()
        print(
            printable(
                f"run {summary.run_id}: {summary.status}" + (f" ({detail})" if detail else "")
            )
        )
        print(
            f"age {format_age(summary.age(now))}, model calls {summary.model_calls}, "
            f"tool calls {summary.tool_calls}, restarts {summary.restarts}, tokens "
            f"{summary.input_tokens} in / {summary.output_tokens} out"
            + (
                f" / {summary.cache_creation_tokens} cache written / "
                f"{summary.cache_read_tokens} cache read"
                if summary.cache_creation_tokens or summary.cache_read_tokens
                else ""
            )
            + f", {summary.events} events"
        )
        if summary.model:
            pins = ", ".join(f"{name} v{version}" for name, version in summary.tools) or "none"
            print(printable(f"pinned: model {summary.model}; tools {pins}"))
        if summary.final_text is not None and summary.finished:
            print(f"final text: {shorten(summary.final_text, 200)}")
        where = store_flags(args)
        for answer in summary.queued:
            print(printable(f"queued in its inbox (not in its journal yet): {answer}"))
        for w in summary.questions:
            action = (
                f"tether approve|reject {where} {args.run} {w.call_id} --by NAME"
                if w.kind == "approval"
                else f"tether resolve {where} {args.run} {w.call_id} "
                "--outcome succeeded|retry|failed --by NAME"
            )
            print(printable(f"awaiting {w.kind}: {w.call_id} {w.tool}  ->  {action}"))
        for r in summary.rests:
            line = f"{r.what}: {r.call_id} {r.tool}"
            if r.event is not None:
                line += f"  ->  tether signal {where} {args.run} {r.event} --data JSON --id ID"
            elif r.kind == "service":
                line += (
                    f"  ->  tether resolve {where} {args.run} {r.call_id} "
                    "--outcome succeeded|failed [--result JSON] --by NAME"
                )
            print(printable(line))
        if summary.action:
            parked = summary.state.parked if summary.state is not None else None
            # The commands filled in, as the approve and signal hints above are.
            action = (
                summary.action
                if parked is None
                else parked_action(parked.cause, f"{where} {args.run}")
            )
            print(printable(f"to go on: {action}"))
        print()
        rows = [["SEQ", "TIME", "TYPE", "WHAT"]]
        for event, text in zip(events, lines, strict=True):
            kind = type(event).__struct_config__.tag
            rows.append([str(event.seq), _when(event.at), str(kind), text])
        print("\n".join(table(rows)))
        return 0 if summary.readable else 1

    return execute(args, command)


def _when(at: float) -> str:
    if not at:
        return "-"
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
