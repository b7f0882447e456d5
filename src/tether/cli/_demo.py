"""``tether demo [kitebase|mail]``: run an agent, kill it with SIGKILL, resume it, count."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any


def add_demo_commands(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="run an agent in real processes, kill one with SIGKILL, resume it",
        description="Run a scripted agent (offline, no API key) as a series of real processes "
        "over one store, kill one of them with SIGKILL at a runtime crash point, resume the "
        "run in a fresh process, and count what the outside world saw. 'kitebase' (the "
        "default): a support agent whose reply needs priya's approval; the process that sends "
        "the reply is killed right after the send, before its result is saved. 'mail': a "
        "three-step email agent killed right after send_email returns. Exit 0 when the demo "
        "behaved as designed, 1 otherwise.",
    )
    demo.add_argument(
        "demo",
        nargs="?",
        choices=("kitebase", "mail"),
        default="kitebase",
        help="which demo (default: kitebase)",
    )
    demo.add_argument(
        "--root",
        metavar="DIR",
        help="keep the store, journal and services in DIR (new or empty); by default a "
        "temporary directory, removed afterwards",
    )
    demo.add_argument("--json", action="store_true", help="print one JSON summary object")
    demo.add_argument(
        "--no-idempotency-key",
        action="store_true",
        help="the side-effecting tool does not pass its idempotency key: the resumed run "
        "repeats the side effect",
    )
    demo.add_argument(
        "--reject",
        action="store_true",
        help="kitebase only: priya rejects the reply; nothing is sent",
    )
    demo.set_defaults(handler=_demo, parser=demo)


def _demo(args: argparse.Namespace) -> int:
    if args.reject and args.demo != "kitebase":
        args.parser.error("--reject applies to the kitebase demo only")
    from ..demo import KITEBASE, MAIL, DemoError, run_kitebase, run_mail

    keep = args.root is not None
    if keep and Path(args.root).exists() and not Path(args.root).is_dir():
        print(f"tether: --root {args.root} is not a directory", file=sys.stderr)
        return 2
    if keep and Path(args.root).exists() and any(Path(args.root).iterdir()):
        print(
            f"tether: --root {args.root} is not empty: give a new or empty directory "
            "(the demo starts its run from nothing)",
            file=sys.stderr,
        )
        return 2
    root = Path(args.root) if keep else Path(tempfile.mkdtemp(prefix="tether-demo-"))
    if not args.json:
        if keep:
            run_id = (KITEBASE if args.demo == "kitebase" else MAIL).run_id
            journal = root / "runs" / f"{run_id}.journal"
            where = f" (kept: look inside afterwards with `tether journal dump {journal}`)"
        else:
            where = " (a temporary directory, removed afterwards; --root DIR keeps it)"
        print(f"store: {root}{where}\n", flush=True)
    try:
        if args.demo == "kitebase":
            summary = run_kitebase(
                root,
                idempotency=not args.no_idempotency_key,
                reject=args.reject,
                json_out=args.json,
            )
        else:
            summary = run_mail(root, idempotency=not args.no_idempotency_key, json_out=args.json)
    except DemoError as exc:
        print(f"tether: demo failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 3
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    if not summary.ok:
        detail = json.dumps(summary.as_dict())
        print(f"tether: the demo did not behave as designed: {detail}", file=sys.stderr)
        return 1
    return 0
