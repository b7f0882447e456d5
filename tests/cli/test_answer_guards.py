"""An answer is refused before it is acknowledged when the journal would refuse it, and an
inbox is never written through a link.

An answer for a run a worker holds waits in the run's inbox until the worker records it. One
the journal cannot hold (over the frame limit) used to be queued, acknowledged, then read as a
torn tail and deleted, and a symbolic link at the inbox's name had ``tether approve`` truncate,
write and chmod whatever it pointed at.
"""

from __future__ import annotations

import logging
import os
import pathlib

import pytest

from tether import RecordTooLargeError, operate
from tether.journal import Decision, FileStore, Signal
from tether.journal._format import HEADER_SIZE, MAX_PAYLOAD, build_group, payload_crc
from tether.journal._inbox import inbox_header
from tether.journal._records import encode_event

from ..postgres.conftest import pg_dsn, pg_schema, pg_server  # noqa: F401
from ..web._envs import PgEnv, env_on
from ._stores import APPROVE, REFUND_CALL, Env, cli_async

HUGE = "x" * (MAX_PAYLOAD + 1)


@pytest.fixture(params=["file", "postgres"])
def any_env(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Env:
    return env_on(request.param, request, tmp_path)


@pytest.mark.slow
async def test_an_answer_over_the_frame_limit_is_refused_before_it_is_queued(
    any_env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env = any_env
    async with env.store() as store:
        journal = await store.open(APPROVE)  # a worker holds the run: answers are queued
        async with journal:
            code, out, err = await cli_async(
                capsys, "signal", *_where(env), APPROVE, "paid", "--data", f'"{HUGE}"'
            )
            assert (code, out) == (1, "")
            assert "refused" in err
            assert "exceeds the" in err
            assert "nothing was recorded" in err
            with pytest.raises(RecordTooLargeError):
                await operate.signal(store, APPROVE, "paid", HUGE)
            # Nothing was queued, and a fitting answer still is.
            assert await store.take_inbox(APPROVE) == []
            code, out, _ = await cli_async(
                capsys, "approve", *_where(env), APPROVE, REFUND_CALL, "--by", "priya"
            )
            assert code == 0
            assert "queued" in out
            assert [type(e) for e in await store.take_inbox(APPROVE)] == [Decision]
    # Not held: refused by the journal itself, before anything is written.
    async with env.store() as store:
        with pytest.raises(RecordTooLargeError):
            await operate.signal(store, APPROVE, "paid", HUGE)
    assert not [e for e in await env.events(APPROVE) if isinstance(e, Signal)]


def _where(env: Env) -> tuple[str, ...]:
    if isinstance(env, PgEnv):
        return ("--store", env.dsn, "--schema", env.schema)
    return ("--root", env.r)


async def test_an_inbox_that_is_a_link_is_never_written_through(
    env: Env, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("not an inbox\n")
    precious.chmod(0o644)
    link = env.root / "runs" / f"{APPROVE}.inbox"
    link.symlink_to(precious)
    async with FileStore(env.root) as store:
        journal = await store.open(APPROVE)
        async with journal:
            for argv in (
                ("approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "priya"),
                ("signal", "--root", env.r, APPROVE, "paid"),
                ("cancel", "--root", env.r, APPROVE),
            ):
                code, out, err = await cli_async(capsys, *argv)
                assert code == 3, (argv, out, err)
                assert "symbolic link" in err
                assert out == ""
    assert precious.read_text() == "not an inbox\n"
    assert precious.stat().st_mode & 0o777 == 0o644
    assert link.is_symlink()
    # The worker that takes the run in reads no answer through it either.
    view = await env.resume(APPROVE)
    assert view.status.value == "waiting_for_approval"
    assert precious.read_text() == "not an inbox\n"


async def test_a_whole_answer_an_older_tether_queued_over_the_limit_is_kept_and_logged(
    env: Env, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Not cut off as a torn tail (it was acknowledged): logged at ERROR, kept in the inbox's
    ``.broken`` copy, and the answers around it are still delivered."""
    big = encode_event(Signal(name="paid", signal_id="s-big", payload=HUGE))
    inbox = env.root / "runs" / f"{APPROVE}.inbox"
    inbox.write_bytes(inbox_header(APPROVE) + build_group([(big, payload_crc(big))]))
    os.chmod(inbox, 0o600)
    async with FileStore(env.root) as store:
        journal = await store.open(APPROVE)
        async with journal:
            with caplog.at_level(logging.ERROR, logger="tether.journal"):
                code, _, err = await cli_async(
                    capsys, "approve", "--root", env.r, APPROVE, REFUND_CALL, "--by", "priya"
                )
            assert code == 0, err
    assert inbox.stat().st_size > HEADER_SIZE + len(big)  # the big answer was not cut away
    assert any("a whole answer the journal cannot hold" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        view = await env.resume(APPROVE)
    assert view.status.value == "done"  # the approval after it was delivered
    kept = env.root / "runs" / f"{APPROVE}.inbox.broken"
    assert kept.exists()
    assert kept.stat().st_size > len(big)
    assert any(r.levelno == logging.ERROR for r in caplog.records)
    assert not [e for e in await env.events(APPROVE) if isinstance(e, Signal)]
