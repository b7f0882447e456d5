"""``tether check --app`` and ``tether repin --app``: deploys that change the agent.

``check`` says, before a deploy, which unfinished runs the new application can continue and
exactly what stops the others (old and new schema side by side), with an exit code a pipeline
can gate on. ``repin`` lets a person accept the application's contract for a run that stopped
on the old one. Both load the application as ``tether worker`` does (``MODULE:FACTORY``
returning a ``WorkerApp``) and read the store; only ``repin`` writes, one ``repinned`` record.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from .. import operate
from ..operate import check_deploy
from ..operate._deploy import repin_plan
from ..supervisor import fold
from ..supervisor._contracts import contracts_for
from ._input import person, text
from ._view import add_store_options, execute, fail, open_store, report, using
from ._worker import app_target

if TYPE_CHECKING:
    from ..supervisor import WorkerApp

APP_HELP = (
    "the application, as for `tether worker`: MODULE:FACTORY, a function returning a "
    "tether.supervisor.WorkerApp (the current directory is importable)"
)


def add_deploy_commands(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="say which unfinished runs an application can continue (before a deploy)",
        description="Read every unfinished run of the store and say, for each, whether the "
        "application (--app) can continue it: it has the model, parameters and every tool "
        "contract the run pinned, or a tool declares a compatible successor (compatible=True: "
        "reworded descriptions, new optional parameters), which the run takes over, "
        "journaled. For a run it would strand, every difference (which tool, old and new "
        "input schema side by side; the model or its parameters). Then the totals, and the "
        "tool versions no unfinished run needs any more. Exit 0 if no run would be stranded, "
        "1 if some would, 2 on bad usage, 3 if the store or the application cannot be read.",
    )
    add_store_options(check)
    check.add_argument(
        "--app", metavar="MODULE:FACTORY", required=True, type=app_target, help=APP_HELP
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=_check)

    repin = commands.add_parser(
        "repin",
        help="let a run go on under the application's contract (a person accepts it)",
        description="Record that NAME accepts the application's (--app) contract for run RUN: "
        "each --tool NAME (by default every tool whose pinned contract the application lacks "
        "or changed) is pinned to the application's latest version of it, and with --model "
        "the application's model and parameters. The run goes on under them from its next "
        "step (a run parked for its contract continues when a worker picks it up); the model "
        "is shown the new contract from its next call, and earlier turns stay as journaled. "
        "Refused (exit 1) if the run finished, a call of a repinned tool is not finished "
        "(a contract never changes under a call), or there is nothing to repin (the run's "
        "pinned contracts are the application's already). Exit 2 on bad usage (--app not "
        "MODULE:FACTORY), 3 if the store or the application cannot be read. If a worker holds "
        "the run, the repin is "
        "queued in its inbox and recorded at its next pause.",
    )
    add_store_options(repin)
    repin.add_argument("run", metavar="RUN", help="the run id")
    repin.add_argument(
        "--app", metavar="MODULE:FACTORY", required=True, type=app_target, help=APP_HELP
    )
    repin.add_argument(
        "--tool",
        metavar="NAME",
        action="append",
        default=[],
        help="repin only this of the tools whose contract changed (repeatable); default: all",
    )
    repin.add_argument(
        "--model", action="store_true", help="also take the application's model and parameters"
    )
    repin.add_argument(
        "--by", metavar="NAME", type=person, required=True, help="who accepts it (recorded)"
    )
    repin.add_argument("--note", metavar="TEXT", type=text, default="", help="why (recorded)")
    repin.set_defaults(handler=_repin, parser=repin)


def _load(target: str) -> WorkerApp | None:
    from ..supervisor import load_app  # the runtime: only to load an application

    try:
        return load_app(target)
    except Exception as exc:  # the application's own code: say what it raised, no traceback
        print(f"tether: cannot load {target}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


async def _open_sources(stack: AsyncExitStack, app: WorkerApp, target: str) -> bool:
    """Register the tools of the application's sources (MCP servers, an agent framework's
    tools) until ``stack`` closes, as a worker does: a check that left them out would find
    every run that pinned one stranded. Whether that worked (if not, it said why)."""
    try:
        await stack.enter_async_context(app.tools.open_sources())
    except Exception as exc:  # an MCP server that cannot be reached, say
        print(
            f"tether: cannot open the tool sources of {target}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return False
    return True


def _check(args: argparse.Namespace) -> int:
    app = _load(args.app)
    if app is None:
        return 3

    async def command() -> int:
        async with AsyncExitStack() as stack:
            if not await _open_sources(stack, app, args.app):
                return 3
            store = await stack.enter_async_context(using(open_store(args), write=False))
            report = await check_deploy(store, app)
        print(json.dumps(report.as_dict(), indent=2) if args.json else "\n".join(report.lines()))
        return 0 if report.ok else 1

    return execute(args, command)


def _repin(args: argparse.Namespace) -> int:
    app = _load(args.app)
    if app is None:
        return 3

    async def command() -> int:
        async with AsyncExitStack() as stack:
            if not await _open_sources(stack, app, args.app):
                return 3
            store = await stack.enter_async_context(
                using(open_store(args), write=True, run=args.run)
            )
            state = fold(await store.read(args.run))
            for name in args.tool or ():
                if name not in app.tools:
                    args.parser.error(f"the application has no tool {name!r}")
            contracts = contracts_for(
                app.model, app.tools, app_version=str(app.options.get("app_version", ""))
            )
            pins, model = repin_plan(state, contracts)  # what the console offers, too
            if args.tool:
                pins = [pin for pin in pins if pin.name in args.tool]
            offered_model, model = model, model if args.model else None
            if not pins and model is None:
                scope = ", ".join(args.tool) if args.tool else "every tool"
                also = "" if offered_model is None else " (its model differs: add --model)"
                return fail(
                    f"refused: run {args.run!r}: nothing to repin: for {scope} the run's pinned "
                    f"contract is the application's already{also}; nothing was recorded",
                    1,
                )
            done = await operate.repin(
                store, args.run, tools=pins, model=model, by=args.by, note=args.note
            )
        report(operate.acknowledgement(args.run, done))
        return 0

    return execute(args, command)
