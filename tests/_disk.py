"""A small, real filesystem that fills up: for tests of what a full disk does.

``small_filesystem(size_mb=4)`` mounts a fresh filesystem of about ``size_mb`` MiB and yields
its mount point (a ``pathlib.Path``); on exit, even after a failure, it is unmounted and its
image removed. It is an ext4 image on a loop device (made with ``-m 0``, so that root, which
runs these tests, cannot dip into reserved blocks), or a size-limited ``tmpfs`` where loop
devices cannot be used. Both need root; without it the test is skipped with the reason, or
fails when the environment has ``TETHER_REQUIRE_DISKFULL=1`` (CI sets it, so that these tests
cannot quietly stop running).

``small_fs`` is the same as a pytest fixture (4 MiB). ``fill_disk(directory)`` writes a filler
file until the filesystem refuses more and returns its path; removing that file frees the space
again.

Usage::

    def test_something(small_fs: pathlib.Path) -> None:
        root = small_fs / "store"
        ...
        filler = fill_disk(small_fs)
        ...  # every write now fails with ENOSPC
        filler.unlink()

The mount point holds ``lost+found`` on ext4: put stores in a folder of their own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

REQUIRE_ENV = "TETHER_REQUIRE_DISKFULL"


class _Unavailable(Exception):
    pass


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise _Unavailable(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _mount_ext4(work: pathlib.Path, mount: pathlib.Path, size_mb: int) -> None:
    image = work / "disk.img"
    with open(image, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop", str(image), str(mount))


def _mount_tmpfs(mount: pathlib.Path, size_mb: int) -> None:
    _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(mount))


def _unmount(mount: pathlib.Path) -> None:
    done = subprocess.run(["umount", str(mount)], capture_output=True, timeout=60, check=False)
    if done.returncode != 0:  # still busy (a descriptor a failed test left open): detach it
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=60, check=False)


def _unavailable(reason: str) -> None:
    message = f"no small filesystem to fill: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


@contextlib.contextmanager
def small_filesystem(size_mb: int = 4) -> Iterator[pathlib.Path]:
    """Mount a fresh filesystem of about ``size_mb`` MiB; yield its mount point.

    Skips the test (fails it under ``TETHER_REQUIRE_DISKFULL=1``) when neither a loop-mounted
    ext4 image nor a tmpfs can be mounted. Unmounts and removes everything on exit.
    """
    if os.geteuid() != 0:
        _unavailable("mounting needs root")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-disk-"))
    mount = work / "mnt"
    mount.mkdir()
    try:
        try:
            _mount_ext4(work, mount, size_mb)
        except (_Unavailable, OSError) as ext4:
            try:
                _mount_tmpfs(mount, size_mb)
            except (_Unavailable, OSError) as tmpfs:
                _unavailable(f"loop ext4 ({ext4}), tmpfs ({tmpfs})")
        try:
            yield mount
        finally:
            _unmount(mount)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def small_fs() -> Iterator[pathlib.Path]:
    """The mount point of a fresh 4 MiB filesystem (see ``small_filesystem``)."""
    with small_filesystem(4) as mount:
        yield mount


def fill_disk(directory: pathlib.Path, name: str = "filler") -> pathlib.Path:
    """Write ``directory/name`` until the filesystem is full; return its path.

    Every byte that fits is written and synced, so the space is really taken; delete the file
    to free it.
    """
    path = directory / name
    chunk = b"\xff" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = len(chunk)
        while size:
            try:
                os.write(fd, chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2  # the last blocks: narrow down to what still fits
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    return path
