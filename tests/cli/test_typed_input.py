"""What a person types into an answer is checked before anything is opened: text that is not
UTF-8, a name that is empty, too long or holds control characters, JSON a journal cannot hold
(``NaN``, numbers past a float or 64 bits, nesting past the parser's stack). Each is a usage
error naming the option, where it was a traceback or a record of ``null``; the journal is left
as it was. And a store the OS will not let a person look into says so: it is not "no run"."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from tether.web import _tokens

from ._stores import APPROVE, ESCALATED, FAILED, Env, cli

REPO = pathlib.Path(__file__).resolve().parents[2]

DEEP = "[" * 5000 + "]" * 5000
CASES = {
    "empty name": (["approve", APPROVE, "toolu_r1", "--by", ""], "a name is needed"),
    "name with a newline": (
        ["approve", APPROVE, "toolu_r1", "--by", "a\nb\x1b[31m"],
        "no control characters",
    ),
    "long name": (["approve", APPROVE, "toolu_r1", "--by", "b" * 300], "at most 200"),
    "name not UTF-8": (["approve", APPROVE, "toolu_r1", "--by", "\udcff"], "not valid UTF-8"),
    "call id not UTF-8": (["approve", APPROVE, "\udcff", "--by", "x"], "not valid UTF-8"),
    "note not UTF-8": (
        ["reject", APPROVE, "toolu_r1", "--by", "x", "--note", "a\udcffb"],
        "not valid UTF-8",
    ),
    "NaN": (["signal", APPROVE, "paid", "--data", "NaN"], "NaN is not a JSON number"),
    "a float too large": (["signal", APPROVE, "paid", "--data", "1e400"], "too large"),
    "an int past 64 bits": (["signal", APPROVE, "paid", "--data", "1" + "0" * 25], "64 bits"),
    "a lone surrogate": (["signal", APPROVE, "paid", "--data", '"\\ud800"'], "not valid Unicode"),
    "deep nesting": (["signal", APPROVE, "paid", "--data", DEEP], "nested too deeply"),
    "deep result": (
        ["resolve", ESCALATED, "toolu_c1", "--outcome", "succeeded", "--result", DEEP, "--by", "x"],
        "nested too deeply",
    ),
    "huge extension": (
        ["retry", FAILED, "--by", "x", "--extend", "max_model_calls=" + "9" * 25],
        "at most",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_a_journal_cannot_hold_is_a_usage_error_and_changes_nothing(
    env: Env, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    argv, said = CASES[case]
    before = {p.name: p.read_bytes() for p in (env.root / "runs").iterdir()}
    with pytest.raises(SystemExit) as exc:
        cli(capsys, argv[0], "--root", env.r, *argv[1:])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert said in err
    assert "Traceback" not in err
    assert len(err.splitlines()[-1]) < 300
    assert {p.name: p.read_bytes() for p in (env.root / "runs").iterdir()} == before


def test_a_name_given_as_it_should_be_is_recorded(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys, "approve", "--root", env.r, APPROVE, "toolu_r1", "--by", "Priya Ş. (ops)"
    )
    assert code == 0, err
    assert "Priya Ş. (ops)" in out


def test_runs_that_is_not_a_directory_is_said_so(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "runs").write_text("not a directory")
    code, _, err = cli(capsys, "cancel", "--root", str(tmp_path), "run-1")
    assert code == 3
    assert "Not a directory" in err
    assert "no run" not in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to become another user")
def test_a_store_a_person_may_not_look_into_is_refused_as_such(env: Env) -> None:
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="tether-perm-"))  # (pytest's is root's)
    try:
        os.chmod(scratch, 0o755)
        root = scratch / "store"
        shutil.copytree(env.root, root, symlinks=True)
        shutil.chown(root, "nobody")  # the root theirs; runs/ (0700, root's) is not
        os.chmod(root, 0o755)
        _refused_as_nobody(root, ["approve", APPROVE, "toolu_r1", "--by", "x"])
        _refused_as_nobody(root, ["cancel", APPROVE])
        _refused_as_nobody(root, ["gc"])
        os.chmod(scratch, 0o700)  # now not even the root can be looked into
        _refused_as_nobody(root, ["cancel", APPROVE])
    finally:
        shutil.rmtree(scratch)


def _refused_as_nobody(root: pathlib.Path, argv: list[str]) -> None:
    command = [sys.executable, "-m", "tests.cli._as_user", "nobody"]
    done = subprocess.run(
        [*command, argv[0], "--root", str(root), *argv[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "Permission denied" in done.stderr
    assert "no run" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_answer_whose_report_cannot_be_written_is_still_said_to_be_done(env: Env) -> None:
    argv = ["approve", "--root", env.r, APPROVE, "toolu_r1", "--by", "priya"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli", *argv],
            cwd=REPO,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "done, but it could not be reported on standard output" in done.stderr
    assert "No space left on device" in done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "tether.cli", "show", "--root", env.r, APPROVE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "approved issue_refund [toolu_r1] by priya" in shown.stdout


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--no-auth", "--port", "99999"], "a port is 0 to 65535"),
        (["serve", "--no-auth", "--port", "-1"], "a port is 0 to 65535"),
        (["serve", "--no-auth", "--header-timeout", "inf"], "must be more than 0"),
        (["serve", "--no-auth", "--poll-interval", "0"], "must be more than 0"),
        (["serve", "--no-auth", "--host", "\udcff"], "not valid UTF-8"),
        (["worker", "--app", "m:f", "--max-active-runs", "-1"], "must be 1 or more"),
        (["worker", "--app", "m:f", "--max-active-runs", "0"], "must be 1 or more"),
        (["worker", "--app", "m:f", "--sweep-interval", "nan"], "must be more than 0"),
    ],
)
def test_an_option_out_of_its_range_is_a_usage_error(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli(capsys, argv[0], "--root", env.r, *argv[1:])
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "binary"])
def test_a_token_file_that_is_no_text_file_is_refused_at_once(
    env: Env,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    tokens = tmp_path / "tokens"
    if kind == "fifo":
        os.mkfifo(tokens)  # opened as a file, it would block the console's start for ever
        monkeypatch.setattr(_tokens, "READ_WAIT", 0.2)
        said = "a pipe that said nothing more in 0.2 s"
    else:
        tokens.write_bytes(b"\xff\xfe alice:0123456789abcdef0123\n")
        said = "not UTF-8 text"
    os.chmod(tokens, 0o600)
    with pytest.raises(SystemExit) as exc:
        cli(capsys, "serve", "--root", env.r, "--token-file", str(tokens), "--port", "0")
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


def test_a_store_url_with_bytes_that_are_not_utf8_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "runs", "--store", "postgresql://u@\udcff/x")
    assert code == 3
    assert "the URL holds bytes that are not UTF-8" in err


def test_a_token_file_given_as_a_pipe_is_read_to_its_end() -> None:
    read, write = os.pipe()  # what `--token-file <(pass show tether-tokens)` hands over
    try:
        os.write(write, b"priya:0123456789abcdef0123\n")
        os.close(write)
        assert _tokens.load_tokens(f"/dev/fd/{read}") == {"0123456789abcdef0123": "priya"}
    finally:
        os.close(read)


def test_nesting_past_the_limit_is_refused_however_deep(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    for depth in (257, 980, 3000):  # (980: deep enough to pass the parser, not the journal's check)
        nested = "[" * depth + "]" * depth
        with pytest.raises(SystemExit) as exc:
            cli(capsys, "signal", "--root", env.r, APPROVE, "paid", "--data", nested)
        assert exc.value.code == 2
        assert "nested" in capsys.readouterr().err
    nested = "[" * 256 + "]" * 256
    code, _, err = cli(capsys, "signal", "--root", env.r, APPROVE, "paid", "--data", nested)
    assert code == 0, err


def test_an_empty_by_or_id_for_a_signal_is_none_given(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "signal", "--root", env.r, APPROVE, "paid", "--by", "", "--id", "")
    assert code == 0, err
