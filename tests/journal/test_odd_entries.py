"""Entries of ``runs/`` that are not journals a store can read hide no run and hang nothing.

A directory, a FIFO or a symbolic link named ``x.journal`` used to be listed as a run: reading
the directory raised ``IsADirectoryError`` out of every listing, and opening the FIFO blocked
for ever (a supervisor's sweep, ``tether runs``, and a worker that then ignored SIGTERM). Now
anything in ``runs/`` that is not a regular file is skipped by ``list_runs`` and ``run_stats``
and named (``odd_entries``, and a warning in the log, once each); files are opened without
blocking and checked to be regular files; and a read that the OS refuses raises an error naming
the run, so that one bad entry never stops a listing of the others.
"""

from __future__ import annotations

import errno
import logging
import os
import pathlib

import pytest

from tether import JournalIOError
from tether.journal import FileStore, Manifest, RunStarted
from tether.journal._file import FILE_MODE
from tether.journal.lowlevel import FileOps


async def new_run(store: FileStore, run_id: str) -> None:
    started = RunStarted(run_id=run_id, manifest=Manifest(model="m"), messages=[])
    await (await store.create(run_id, [started])).aclose()


def make_odd_entries(runs: pathlib.Path) -> None:
    """A FIFO, a directory and a symbolic link, each named like a run's journal."""
    os.mkfifo(runs / "fifo.journal")
    (runs / "dir.journal").mkdir()
    (runs / "link.journal").symlink_to(runs / "real.journal")


ODD = {"fifo.journal": "a FIFO", "dir.journal": "a directory", "link.journal": "a symbolic link"}


async def test_listings_skip_and_name_what_is_not_a_regular_file(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FileStore(tmp_path) as store:
        await new_run(store, "real")
        make_odd_entries(tmp_path / "runs")
        with caplog.at_level(logging.WARNING, logger="tether.journal"):
            assert await store.list_runs() == ["real"]
            assert set(await store.run_stats()) == {"real"}
            assert await store.list_runs() == ["real"]
        assert await store.odd_entries() == ODD
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == len(ODD)  # once each, not at every sweep
        for name, kind in ODD.items():
            assert any(f"{tmp_path / 'runs' / name} is {kind}" in w for w in warnings), name


async def test_reading_a_fifo_or_a_directory_named_like_a_journal_fails_at_once(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store:
        make_odd_entries(tmp_path / "runs")
        for run_id, what in (("fifo", "a FIFO"), ("dir", "a directory")):
            with pytest.raises(JournalIOError) as info:
                await store.read(run_id)  # a FIFO used to block here for ever
            assert info.value.path == store.location(run_id)
            assert f"is {what}, not a regular file" in str(info.value)


class RefusingFileOps(FileOps):
    """The OS refusing to open one file, as ``EACCES`` for a journal of mode 000 does to any
    user but root (and these tests run as root, whom no mode stops)."""

    def __init__(self, refused: str) -> None:
        self.refused = refused

    def open(self, path: str, flags: int, mode: int = FILE_MODE) -> int:
        if path == self.refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return super().open(path, flags, mode)


async def test_a_run_the_os_will_not_let_us_read_raises_an_error_naming_it(
    tmp_path: pathlib.Path,
) -> None:
    async with FileStore(tmp_path) as store:
        for run_id in ("a", "locked-out", "z"):
            await new_run(store, run_id)
    refused = str(tmp_path / "runs" / "locked-out.journal")
    async with FileStore(tmp_path, file_ops=RefusingFileOps(refused)) as store:
        assert await store.list_runs() == ["a", "locked-out", "z"]  # a regular file: listed
        with pytest.raises(JournalIOError) as info:
            await store.read("locked-out")
        assert info.value.path == refused
        assert info.value.errno == errno.EACCES
        assert "cannot read: [Errno 13] Permission denied" in str(info.value)
        assert len(await store.read("a")) == len(await store.read("z")) == 1
