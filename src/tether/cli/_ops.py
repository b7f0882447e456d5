"""``tether approve|reject|resolve|retry|cancel``: a person's answer, appended to a run's journal.

Each command hands its answer to ``tether.operate`` (the implementation the web console uses
too), which opens the run for writing (a directory store: its journal under its exclusive
lock; PostgreSQL: a lease on the run), folds it, checks that the answer fits the run's current
state (``tether.supervisor._answers.answer_problem``, the check the supervisor makes too), and
appends one record (``decision``, ``resolved``, ``retried``, ``signal`` or ``run_finished``).
When a worker holds the run, the answer is checked against what the run says so far and queued
in its inbox instead. This module parses the options and prints what was recorded.
The run itself continues when a supervisor next picks it up: a running ``tether worker``, or the
next process that enters a ``Supervisor`` on the store.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import operate
from ..operate import acknowledgement
from ..operate._display import retry_details
from ..tools import wait_for
from ._input import LIMIT_MAX, json_value, person, some_person, text
from ._view import add_store_options, execute, open_store, report, using

if TYPE_CHECKING:
    from ..supervisor._verbs import Recorded

CONTINUES = (
    "The run continues when a supervisor next picks it up (a running `tether worker`, or the "
    "next process that enters a Supervisor on this store)."
)

BUSY = (
    " If a worker is advancing the run (it holds the journal's lock, or the run's lease in "
    "PostgreSQL), the answer is checked against the run as recorded so far and queued in the "
    "run's inbox: that worker records it at its next pause. The store is a directory (--root) "
    "or a PostgreSQL database (--store URL). Exit 3 if the store cannot be read or reached."
)


def add_op_commands(commands: Any) -> None:
    for verb, approved in (("approve", True), ("reject", False)):
        effect = (
            "the call runs"
            if approved
            else "the call does not run; the model gets an error tool result carrying the note"
        )
        p = commands.add_parser(
            verb,
            help=f"{verb} a tool call that waits for approval",
            description=f"Record that NAME {verb}s tool call CALL of run RUN ({effect}). "
            "Refused (exit 1) unless the run exists and is not finished, the call belongs to "
            "the model's current turn, has not started or finished, is not escalated and has "
            "no decision yet, and its tool's approval deadline (pinned in the run's manifest) has "
            "not passed: after it, the deadline's outcome stands." + BUSY + " " + CONTINUES,
        )
        add_store_options(p)
        p.add_argument("run", metavar="RUN", help="the run id")
        p.add_argument(
            "call", metavar="CALL", type=text, help="the tool call id (see `tether show`)"
        )
        p.add_argument(
            "--by", metavar="NAME", type=person, required=True, help="who decides (recorded)"
        )
        p.add_argument(
            "--note",
            metavar="TEXT",
            type=text,
            default="",
            help="why (recorded; a rejection's note is what the model reads)",
        )
        p.set_defaults(handler=_decide, approved=approved)

    resolve = commands.add_parser(
        "resolve",
        help="answer an escalated tool call (outcome unknown after a crash), or one that "
        "waits for its tool's service",
        description="Record a person's answer to escalated call CALL of run RUN. "
        "'succeeded': the call did happen; --result is its result (JSON), recorded as the "
        "tool's result. 'retry': run it again (with the same idempotency key). 'failed': the "
        "model gets an error tool result (--result if given, else the note). A call that waits "
        "for its tool's service (nothing was sent; a server retired, a credential revoked) "
        "takes 'succeeded' or 'failed' too: the model gets that result and the run goes on. "
        "Refused (exit 1) unless the call is escalated and not yet resolved, or waits for its "
        "service, and the run is not finished." + BUSY + " " + CONTINUES,
    )
    add_store_options(resolve)
    resolve.add_argument("run", metavar="RUN", help="the run id")
    resolve.add_argument(
        "call", metavar="CALL", type=text, help="the escalated (or service-waiting) tool call id"
    )
    resolve.add_argument(
        "--outcome", required=True, choices=("succeeded", "retry", "failed"), help="the answer"
    )
    resolve.add_argument(
        "--result",
        metavar="JSON",
        help="the call's result as JSON (succeeded or failed; a bare word is not JSON: quote "
        "strings as '\"text\"')",
    )
    resolve.add_argument(
        "--by", metavar="NAME", type=person, required=True, help="who resolves (recorded)"
    )
    resolve.add_argument("--note", metavar="TEXT", type=text, default="", help="why (recorded)")
    resolve.set_defaults(handler=_resolve, parser=resolve)

    retry = commands.add_parser(
        "retry",
        help="send on a run the runtime parked (model refused, crash loop) or that failed",
        description="Record that NAME sends run RUN on: a run the runtime parked as "
        "needs_attention for a cause a person had to fix (the model refused the request for "
        "good: bad request, missing or rejected credentials, unknown model, answers that stay "
        "malformed; or its process kept stopping without progress) continues from where it "
        "stopped, with a fresh crash-loop count. A failed run is re-opened on purpose; if it "
        "failed on a budget, --extend raises that limit (a run that would fail again at once "
        "is refused). Calls waiting for a resolution are answered with `tether resolve`, not "
        "this. Refused (exit 1) otherwise." + BUSY + " " + CONTINUES,
    )
    add_store_options(retry)
    retry.add_argument("run", metavar="RUN", help="the run id")
    retry.add_argument(
        "--by", metavar="NAME", type=person, required=True, help="who sends it on (recorded)"
    )
    retry.add_argument("--note", metavar="TEXT", type=text, default="", help="why (recorded)")
    retry.add_argument(
        "--extend",
        metavar="LIMIT=N",
        action="append",
        default=[],
        type=_extension,
        help="raise one of the run's budgets by N: max_model_calls, max_tool_calls, max_tokens "
        "or deadline_s (seconds); repeat for several, e.g. --extend max_model_calls=20",
    )
    retry.set_defaults(handler=_retry)

    signal = commands.add_parser(
        "signal",
        help="deliver a named event to a run (a call waiting for it gets the payload)",
        description="Record that event NAME happened for run RUN, with --data as its payload "
        "(JSON): a call waiting for NAME (tether.wait_for) gets the payload as its result; a "
        "signal that comes before anything waits for it is kept until a call asks. --id makes "
        "it count once however often it is delivered (give the sender's own delivery id); by "
        "default each delivery is a new signal. Refused (exit 1) if the run finished." + BUSY,
    )
    add_store_options(signal)
    signal.add_argument("run", metavar="RUN", help="the run id")
    signal.add_argument("name", metavar="NAME", help="the event's name")
    signal.add_argument("--data", metavar="JSON", help="the payload, as JSON (default: null)")
    signal.add_argument(
        "--id", metavar="ID", type=text, help="the signal's id (deliveries count once)"
    )
    signal.add_argument(
        "--by", metavar="NAME", type=some_person, help="who or what sends it (recorded)"
    )
    signal.set_defaults(handler=_signal, parser=signal)

    cancel = commands.add_parser(
        "cancel",
        help="end a run as cancelled",
        description="Append run_finished with status 'cancelled' to run RUN's journal: no "
        "supervisor will continue it; its child runs whose waits are open are cancelled too "
        "('its parent: REASON'). Refused (exit 1) if the run already finished. If a worker is "
        "advancing the run, the cancellation is queued in the run's inbox and that worker stops "
        "the run within about a second, whatever it is doing: a tool call in flight is "
        "cancelled and recorded as interrupted (its outcome unknown), no new call starts, and "
        "it records the cancellation. The store is a directory (--root) or a PostgreSQL "
        "database (--store URL). Exit 3 if the store cannot be read or reached.",
    )
    add_store_options(cancel)
    cancel.add_argument("run", metavar="RUN", help="the run id")
    cancel.add_argument(
        "--reason",
        metavar="TEXT",
        type=text,
        default="cancelled",
        help="recorded reason (default: cancelled)",
    )
    cancel.add_argument(
        "--by", metavar="NAME", type=some_person, help="who cancels (recorded in the reason)"
    )
    cancel.set_defaults(handler=_cancel)


async def _answer(
    args: argparse.Namespace, verb: Callable[..., Awaitable[Recorded]], *posargs: Any, **kw: Any
) -> Recorded:
    """Run one of ``tether.operate``'s answers on the store the options name."""
    async with using(open_store(args), write=True, run=args.run) as store:
        return await verb(store, args.run, *posargs, **kw)


def _decide(args: argparse.Namespace) -> int:
    async def command() -> int:
        done = await _answer(
            args, operate.decide, args.call, approved=args.approved, by=args.by, note=args.note
        )
        report(acknowledgement(args.run, done), CONTINUES)
        return 0

    return execute(args, command)


def _resolve(args: argparse.Namespace) -> int:
    if args.result is not None and args.outcome == "retry":
        args.parser.error("--result does not apply to --outcome retry")
    result = _json_option(args, "--result", args.result)

    async def command() -> int:
        done = await _answer(
            args,
            operate.resolve,
            args.call,
            outcome=args.outcome,
            result=result,
            by=args.by,
            note=args.note,
        )
        report(acknowledgement(args.run, done), CONTINUES)
        return 0

    return execute(args, command)


def _extension(given: str) -> tuple[str, float]:
    from ..supervisor._verbs import EXTENDABLE

    name, sep, amount = given.partition("=")
    if not sep or name not in EXTENDABLE:
        raise argparse.ArgumentTypeError(
            f"expected LIMIT=N with LIMIT one of {', '.join(EXTENDABLE)}, got {given!r}"
        )
    try:
        value = float(amount) if name == "deadline_s" else int(amount)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {amount!r} in {given!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"an extension must be more than 0, got {given!r}")
    if not value <= LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"an extension is at most {LIMIT_MAX}, got {given!r}")
    return name, value


def _retry(args: argparse.Namespace) -> int:
    async def command() -> int:
        done = await _answer(args, operate.retry, by=args.by, note=args.note, extend=args.extend)
        report(acknowledgement(args.run, done), *retry_details(done), CONTINUES)
        return 0

    return execute(args, command)


def _signal(args: argparse.Namespace) -> int:
    payload = _json_option(args, "--data", args.data)
    try:
        wait_for(args.name)
        if args.id:  # (an empty one: a new id, as none)
            operate.check_signal_id(args.id)
    except ValueError as exc:
        args.parser.error(str(exc))
    signal_id = args.id or uuid.uuid4().hex

    async def command() -> int:
        done = await _answer(
            args, operate.signal, args.name, payload, signal_id=signal_id, by=args.by or ""
        )
        report(acknowledgement(args.run, done), *([] if done.repeated else [CONTINUES]))
        return 0

    return execute(args, command)


def _cancel(args: argparse.Namespace) -> int:
    async def command() -> int:
        done = await _answer(args, operate.cancel, reason=args.reason, by=args.by or "")
        report(acknowledgement(args.run, done))
        return 0

    return execute(args, command)


def _json_option(args: argparse.Namespace, flag: str, given: str | None) -> Any:
    """The JSON value an option was given (``None`` when it was not); a usage error if the
    text is not JSON a journal can hold (``_input.json_value``)."""
    if given is None:
        return None
    try:
        return json_value(flag, given)
    except ValueError as exc:
        args.parser.error(str(exc))
