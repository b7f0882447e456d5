"""``tether journal verify|dump|repair PATH``: inspect and mend one journal file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from .._errors import JournalCorruptError, JournalLockedError, JournalVersionError
from ..journal import repair_file, verify_file
from ..journal._layout import read_file, scan


def add_journal_commands(commands: Any) -> None:
    journal = commands.add_parser(
        "journal",
        help="verify, dump or repair one journal file",
        description="Inspect and mend one run's journal file (runs/<run_id>.journal).",
    )
    sub = journal.add_subparsers(dest="journal_command", metavar="ACTION", required=True)

    verify = sub.add_parser(
        "verify",
        help="check every frame; print a one-line summary",
        description="Check every frame of a journal without changing it. Exit 0 if it is "
        "sound (a torn tail, which opening would truncate, is reported but is not an error); "
        "exit 1 with the offset and reason if it is corrupt. A journal in a store's runs/ "
        "directory must name its file's run in its header, as the store requires (a journal "
        "copied there under another run's name is corrupt to it).",
    )
    verify.add_argument("path", help="the journal file")
    verify.set_defaults(handler=_verify)

    dump = sub.add_parser(
        "dump",
        help="print every event as one JSON object per line",
        description="Print the journal's valid events as JSON lines (one event per line, "
        "with its 'type'). Exit 1 after the valid prefix if the journal is corrupt.",
    )
    dump.add_argument("path", help="the journal file")
    dump.set_defaults(handler=_dump)

    repair = sub.add_parser(
        "repair",
        help="cut a damaged journal back to its last good group",
        description="Copy everything after the last good group to PATH.broken, then truncate "
        "the journal there and fsync. Events after the damage are lost from the journal (kept "
        "in the .broken file). Refuses to change anything without --yes, and to cut off the "
        "record of a finished run's end without --reopen as well.",
    )
    repair.add_argument("path", help="the journal file")
    repair.add_argument("--yes", action="store_true", help="really change the file")
    repair.add_argument(
        "--reopen",
        action="store_true",
        help="with --yes: cut even when what is cut off records that the run ended (the run "
        "becomes unfinished, and a worker carries it on from the cut point)",
    )
    repair.set_defaults(handler=_repair)


def _fail(message: str, code: int) -> int:
    print(f"tether: {message}", file=sys.stderr)
    return code


def _verify(args: argparse.Namespace) -> int:
    try:
        result = verify_file(args.path)
    except (JournalCorruptError, JournalVersionError) as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        return _fail(f"{args.path}: {exc.strerror or exc}", 3)
    summary = (
        f"ok: {args.path}: run {result.run_id}, {len(result.events)} records in "
        f"{result.groups} groups, {result.end} bytes, last seq {result.last_seq}"
    )
    if result.damage is not None:
        torn = result.file_size - result.end
        summary += (
            f"; torn tail of {torn} bytes at offset {result.end} ({result.damage.reason}) "
            "will be truncated when the run is next opened"
        )
    elif result.file_size > result.end:  # zeros: space kept for appends (or a lost group)
        summary += (
            f"; then {result.file_size - result.end} bytes of zeros (space kept for appends, "
            "or a last group that never reached the disk)"
        )
    print(summary)
    return 0


def _dump(args: argparse.Namespace) -> int:
    try:
        result = scan(read_file(args.path), args.path)
    except (JournalCorruptError, JournalVersionError) as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        return _fail(f"{args.path}: {exc.strerror or exc}", 3)
    out = sys.stdout.buffer
    encoder = msgspec.json.Encoder()
    for event in result.events:
        out.write(encoder.encode(event) + b"\n")
    out.flush()
    if result.damage is not None and result.damage.kind == "corrupt":
        d = result.damage
        return _fail(f"{args.path}: corrupt at offset {d.at} (seq {d.seq}): {d.reason}", 1)
    return 0


def _repair(args: argparse.Namespace) -> int:
    try:
        report = repair_file(args.path, apply=False)
        if args.yes and not (report.unfinishes and not args.reopen):
            report = repair_file(args.path, apply=True)
    except JournalLockedError as exc:
        return _fail(f"{exc}; stop the process that has the run open first", 1)
    except (JournalCorruptError, JournalVersionError) as exc:
        return _fail(f"{exc}; the header is damaged, nothing can be kept", 1)
    except OSError as exc:
        return _fail(f"{args.path}: {exc.strerror or exc}", 3)
    if report.bytes_removed == 0:
        print(f"ok: {args.path}: nothing to repair ({report.events_kept} records)")
        return 0
    plan = (
        f"keep {report.events_kept} records ({report.end} bytes), remove {report.bytes_removed} "
        f"bytes after offset {report.end}"
        + (f" ({report.reason})" if report.reason else "")
        + (f", saved to {report.moved_to}" if report.moved_to else " (all zeros, not saved)")
    )
    if report.unfinishes and not (args.yes and args.reopen):
        print(f"would {plan}", file=sys.stderr)
        return _fail(
            "the part cut off records that the run ended: after the cut the run would look "
            "unfinished and the next worker would carry on from the cut point (asking again "
            "for approvals, running calls again under their policies). Give --yes --reopen "
            "if that is what you want",
            1,
        )
    if not args.yes and report.moved_to is None and not report.unfinishes:
        print(
            f"ok: {args.path}: nothing to repair ({report.events_kept} records; then "
            f"{report.bytes_removed} bytes of zeros, space kept for appends: --yes removes them)"
        )
        return 0
    if not args.yes:
        print(f"would {plan}", file=sys.stderr)
        return _fail("refusing to change the journal without --yes", 1)
    done = plan.replace("keep ", "kept ", 1).replace(", remove ", ", removed ", 1)
    print(f"repaired {args.path}: {done}")
    return 0
