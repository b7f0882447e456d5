"""``tether approve|reject|resolve|cancel``: checked records, and runs that continue from them."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys

import anyio
import pytest

from tether.journal import Decision, FileStore, Resolved, Retried, RunFinished, ToolFailed
from tether.models import Message, ToolResultBlock, is_known
from tether.supervisor import RunStatus

from ._stores import (
    APPROVE,
    CHARGE_CALL,
    DONE,
    ESCALATED,
    FAILED,
    REFUND_CALL,
    Env,
    cli,
    cli_async,
)


def _results(view_messages: list[Message]) -> dict[str, ToolResultBlock]:
    out: dict[str, ToolResultBlock] = {}
    for message in view_messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            out.update(
                {b["tool_use_id"]: b for b in content if is_known(b) and b["type"] == "tool_result"}
            )
    return out


def test_approve_then_a_supervisor_finishes_the_run(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "priya", "--note", "ok"
    )
    assert (code, err) == (0, "")
    assert (
        f'recorded: approved {REFUND_CALL} issue_refund(order="o-1") of run {APPROVE} by '
        "priya (ok) (seq 2)"
    ) in out
    assert "continues when a supervisor next picks it up" in out
    assert "tether worker" in out
    last = anyio.run(env.events, APPROVE)[-1]
    assert isinstance(last, Decision)
    assert (last.call_id, last.approved, last.by, last.note) == (REFUND_CALL, True, "priya", "ok")
    assert env.refunds == []
    code, out, _ = cli(capsys, "runs", "--root", env.r, "--status", "running")
    assert APPROVE in out
    assert "no process holds it: continues when a supervisor picks it up" in out

    view = anyio.run(env.resume, APPROVE)
    assert view.status is RunStatus.DONE
    assert view.final_text == "refund handled"
    assert env.refunds == ["o-1"]


def test_reject_reaches_the_model_with_the_note(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        capsys, "reject", "--root", env.r, APPROVE, REFUND_CALL, "--by", "sam",
        "--note", "customer already refunded",
    )  # fmt: skip
    assert code == 0
    assert f"recorded: rejected {REFUND_CALL}" in out
    view = anyio.run(env.resume, APPROVE)
    assert view.status is RunStatus.DONE
    result = _results(view.messages)[REFUND_CALL]
    assert result["is_error"] is True
    assert result["content"] == "issue_refund was rejected by sam: customer already refunded"
    assert env.refunds == []


def test_decision_refusals(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("--root", env.r)
    cases = [
        (("approve", *base, "run-nope", REFUND_CALL), "no run 'run-nope'"),
        (
            ("approve", *base, APPROVE, "toolu_zz"),
            f"not in the model's current turn (calls there: {REFUND_CALL} (issue_refund))",
        ),
        (
            ("approve", *base, ESCALATED, CHARGE_CALL),
            "is escalated; answer it with resolve",
        ),
        (("reject", *base, DONE, "toolu_l1"), "run already finished (done)"),
        (("approve", *base, FAILED, "toolu_l2"), "run already finished (failed)"),
    ]
    for argv, message in cases:
        code, out, err = cli(capsys, *argv, "--by", "priya")
        assert code == 1, argv
        assert message in err, (argv, err)
        assert out == ""
    assert cli(capsys, "approve", *base, APPROVE, REFUND_CALL, "--by", "priya")[0] == 0
    code, _, err = cli(capsys, "reject", *base, APPROVE, REFUND_CALL, "--by", "sam")
    assert code == 1
    assert f"call {REFUND_CALL!r} was already approved by priya" in err
    events = anyio.run(env.events, APPROVE)
    assert sum(isinstance(e, Decision) for e in events) == 1
    # a missing --by is a usage error
    with pytest.raises(SystemExit) as exc:
        cli(capsys, "approve", *base, APPROVE, REFUND_CALL)
    assert exc.value.code == 2


async def test_an_answer_for_a_busy_run_waits_in_its_inbox(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FileStore(env.root) as store:
        journal = await store.open(APPROVE)
        async with journal:
            code, out, err = await cli_async(
                capsys, "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "priya"
            )
            assert code == 0, err
            assert "queued: another process is advancing the run" in out
            # Answers are still checked against the journal: a second approval is refused.
            code, _, err = await cli_async(
                capsys, "approve", "--root", env.r, "no-such-run", REFUND_CALL, "--by", "x"
            )
            assert code == 1
        assert [type(e).__name__ for e in await store.take_inbox(APPROVE)] == ["Decision"]
    events = await env.events(APPROVE)
    assert not any(isinstance(e, Decision | RunFinished) for e in events)
    # The holder stopped before recording it: the journal still waits for approval, and the
    # listings say so, with the approval queued, and no longer offer the call.
    code, out, _ = await cli_async(capsys, "show", "--root", env.r, APPROVE)
    assert code == 0
    assert f"run {APPROVE}: waiting_for_approval (queued in its inbox: approved" in out
    assert f"awaiting approval: {REFUND_CALL}" not in out
    code, out, _ = await cli_async(capsys, "runs", "--root", env.r, "--json")
    (run,) = [r for r in json.loads(out) if r["run_id"] == APPROVE]
    assert run["waiting"] == []
    assert run["queued"] == [
        f'approved {REFUND_CALL} issue_refund(order="o-1") of run {APPROVE} by priya'
    ]


async def test_an_approval_queued_after_a_post_killed_mid_write_is_recorded(
    env: Env,
) -> None:
    """A process queueing an answer dies halfway through writing it; the next answer, from a
    real ``tether approve``, is queued after the torn bytes are cut away, and recorded."""
    repo = pathlib.Path(__file__).resolve().parents[2]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *argv], cwd=repo, capture_output=True, text=True, timeout=60
        )

    async with FileStore(env.root) as store:
        async with await store.open(APPROVE):  # a worker is advancing the run
            killed = await anyio.to_thread.run_sync(
                run, "tests.journal._inbox_proc", "post", env.r, APPROVE
            )
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            assert (env.root / "runs" / f"{APPROVE}.inbox").stat().st_size > 0
            approved = await anyio.to_thread.run_sync(
                run, "tether.cli", "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "priya"
            )
            assert approved.returncode == 0, approved.stderr
            assert "queued: another process is advancing the run" in approved.stdout
        queued = await store.take_inbox(APPROVE)
        assert [(e.call_id, e.by) for e in queued if isinstance(e, Decision)] == [
            (REFUND_CALL, "priya")
        ]
    view = await env.resume(APPROVE)
    assert view.status is RunStatus.DONE
    assert env.refunds == ["o-1"]
    decisions = [e for e in await env.events(APPROVE) if isinstance(e, Decision)]
    assert [(d.call_id, d.by) for d in decisions] == [(REFUND_CALL, "priya")]


@pytest.mark.parametrize(
    ("outcome", "extra", "charges", "content", "is_error"),
    [
        ("succeeded", ["--result", '{"charge_id": "ch_9"}'], [], '{"charge_id":"ch_9"}', False),
        ("retry", [], ["c-1"], "charged c-1", False),
        ("failed", ["--note", "card declined upstream"], [], "card declined upstream", True),
    ],
)
def test_resolve(
    env: Env,
    capsys: pytest.CaptureFixture[str],
    outcome: str,
    extra: list[str],
    charges: list[str],
    content: str,
    is_error: bool,
) -> None:
    code, out, err = cli(
        capsys, "resolve", "--root", env.r, ESCALATED, CHARGE_CALL, "--outcome", outcome,
        "--by", "omar", *extra,
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert f'recorded: resolved {CHARGE_CALL} charge_card(card="c-1") of run {ESCALATED}' in out
    assert f"as {outcome}" in out
    assert "by omar" in out
    last = anyio.run(env.events, ESCALATED)[-1]
    assert isinstance(last, Resolved)
    assert (last.outcome, last.by) == (outcome, "omar")

    view = anyio.run(env.resume, ESCALATED)
    assert view.status is RunStatus.DONE
    result = _results(view.messages)[CHARGE_CALL]
    assert (result["content"], result["is_error"]) == (content, is_error)
    assert env.charges == charges

    code, _, err = cli(
        capsys, "resolve", "--root", env.r, ESCALATED, CHARGE_CALL, "--outcome", "retry",
        "--by", "omar",
    )  # fmt: skip
    assert code == 1
    assert "run already finished (done)" in err


def test_resolve_refusals(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("resolve", "--root", env.r)
    code, _, err = cli(capsys, *base, APPROVE, REFUND_CALL, "--outcome", "retry", "--by", "o")
    assert code == 1
    assert f"call {REFUND_CALL!r} (issue_refund) is not escalated: it waits for approval" in err
    assert cli(capsys, "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "o")[0] == 0
    code, _, err = cli(capsys, *base, APPROVE, REFUND_CALL, "--outcome", "retry", "--by", "o")
    assert code == 1  # approved, not run yet: nothing for a person to resolve
    assert "is not escalated: only a call whose outcome is unknown, or that its tool" in err
    ok = cli(capsys, *base, ESCALATED, CHARGE_CALL, "--outcome", "failed", "--by", "o")
    assert ok[0] == 0
    code, _, err = cli(capsys, *base, ESCALATED, CHARGE_CALL, "--outcome", "retry", "--by", "o")
    assert code == 1
    assert "was already resolved" in err
    for bad in (["--result", "not json"], ["--outcome", "retry", "--result", "1"]):
        argv = [*base, ESCALATED, CHARGE_CALL, "--outcome", "succeeded", "--by", "o", *bad]
        with pytest.raises(SystemExit) as exc:
            cli(capsys, *argv)
        assert exc.value.code == 2
    events = anyio.run(env.events, ESCALATED)
    assert sum(isinstance(e, Resolved) for e in events) == 1


def test_cancel(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "cancel", "--root", env.r, APPROVE, "--reason", "duplicate ticket")
    assert code == 0
    assert f"recorded: run {APPROVE} cancelled: duplicate ticket" in out
    last = anyio.run(env.events, APPROVE)[-1]
    assert isinstance(last, RunFinished)
    assert (last.status, last.reason) == ("cancelled", "duplicate ticket")
    code, out, _ = cli(capsys, "runs", "--root", env.r, "--status", "cancelled")
    assert APPROVE in out
    assert "duplicate ticket" in out

    code, _, err = cli(capsys, "cancel", "--root", env.r, APPROVE)
    assert code == 1
    assert "run already finished (cancelled)" in err
    code, _, err = cli(capsys, "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "p")
    assert code == 1
    assert "run already finished (cancelled)" in err
    assert anyio.run(env.resume, APPROVE).status is RunStatus.CANCELLED
    assert env.refunds == []


def test_retry_reopens_a_failed_run_with_an_extended_budget(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("retry", "--root", env.r, FAILED, "--by", "ops")
    code, _, err = cli(capsys, *base)
    assert code == 1
    assert (
        "would fail again at once: model call budget exhausted: 1 of 1; extend its budgets" in err
    )
    for bad in ("max_model_calls", "tokens=5", "max_model_calls=x", "deadline_s=-1"):
        with pytest.raises(SystemExit) as exc:
            cli(capsys, *base, "--extend", bad)
        assert exc.value.code == 2
    code, out, err = cli(
        capsys, *base, "--note", "one more try", "--extend", "max_model_calls=2",
        "--extend", "max_tokens=500",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert f"recorded: retry of run {FAILED} by ops (one more try) (seq " in out
    assert "it had stopped with: failed: model call budget exhausted: 1 of 1" in out
    assert '"max_model_calls":3' in out
    last = anyio.run(env.events, FAILED)[-1]
    assert isinstance(last, Retried)
    assert last.budgets is not None
    assert (last.budgets.max_model_calls, last.budgets.max_tokens) == (3, None)  # unlimited stays
    code, out, _ = cli(capsys, "show", "--root", env.r, FAILED)
    assert "retried by ops" in out
    assert anyio.run(env.resume, FAILED).status is RunStatus.DONE

    code, _, err = cli(capsys, *base)
    assert code == 1
    assert "run already finished (done)" in err


def test_retry_refuses_runs_that_wait_for_a_person(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "retry", "--root", env.r, ESCALATED, "--by", "ops")
    assert code == 1
    assert "answer them with resolve" in err
    code, _, err = cli(capsys, "retry", "--root", env.r, APPROVE, "--by", "ops")
    assert code == 1
    assert "nothing to retry: the run is waiting_for_approval" in err


@pytest.mark.parametrize(
    "verb",
    [
        ["cancel"],
        ["approve", "toolu_01", "--by", "p"],
        ["signal", "customer.replied", "--id", "m1"],
        ["retry", "--by", "p"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_journal_whose_records_make_no_run_is_refused_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    """Every frame checks, but a result answers a call the run never made (a journal written
    by hand, as the journal how-to's example does): the verbs say so in one line and record
    nothing; `tether show` and `tether runs` say what is wrong and where to look."""
    from tether.journal import Manifest, RunStarted, ToolResult

    async def write() -> None:
        first = RunStarted(run_id="run-x", manifest=Manifest(model="m"), messages=[])
        async with FileStore(tmp_path) as store, await store.create("run-x", [first]) as j:
            await j.append([ToolResult(call_id="toolu_01", content="x", ok=True)])

    anyio.run(write)
    root = str(tmp_path)
    code, out, err = cli(capsys, verb[0], "--root", root, "run-x", *verb[1:])
    assert code == 1, (out, err)
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "tether: run 'run-x': its journal's records do not make a run (record 1: refers to "
        "tool call 'toolu_01', which the run never made); nothing was recorded "
        "(`tether journal dump` shows them)"
    ]
    code, out, _ = cli(capsys, "show", "--root", root, "run-x")
    assert code == 1
    assert "its journal's records do not make a run" in out
    assert "`tether journal dump`" in out
    code, out, _ = cli(capsys, "runs", "--root", root)
    assert code == 0
    assert "its journal's records do not make a run" in out


async def test_cancelling_an_escalated_run_ends_its_call_as_unresolved(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """The escalated call waited for a person; the cancellation's end of it says so (not
    that a process stopped while it ran)."""
    code, _, err = await cli_async(
        capsys, "cancel", "--root", env.r, ESCALATED, "--reason", "refunded by hand", "--by", "o"
    )
    assert code == 0, err
    ended = [e for e in await env.events(ESCALATED) if isinstance(e, ToolFailed)][-1]
    assert ended.call_id == CHARGE_CALL
    assert ended.timed_out
    assert ended.error == (
        "interrupted: the call waited for a person to resolve it, and the run was cancelled "
        "first; whether it had its effect is unknown"
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["show", "{root}", "r" * 5000], 2),
        (["approve", "{root}", APPROVE, "toolu_" + "x" * 4994, "--by", "priya"], 1),
        (["signal", "{root}", APPROVE, "e" * 5000], 2),
        (["signal", "{root}", APPROVE, "paid", "--id", "i" * 5000], 2),
    ],
    ids=["run id", "call id", "event name", "signal id"],
)
def test_a_long_id_is_refused_in_one_short_line(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    argv = [a for part in argv for a in (["--root", env.r] if part == "{root}" else [part])]
    got: object
    try:
        got, _, err = cli(capsys, *argv)
    except SystemExit as exc:  # a usage error, from the parser
        got, err = exc.code, capsys.readouterr().err
    assert got == code
    assert "Traceback" not in err
    assert "(5,000 characters)" in err
    assert len(err.splitlines()[-1]) < 300, err[:500]
