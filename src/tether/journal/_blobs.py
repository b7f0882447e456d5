"""A content-addressed blob store for large tool outputs, beside the journals.

A blob lives at ``<root>/blobs/<first two hex digits>/<sha256>``. It is written to a temporary
file, fsync'd, renamed into place, and its directory fsync'd, all before the journal record that
refers to it is appended, so a durable record never points at a blob that a crash could lose.
Identical payloads share one file. Reads check the digest.

A write that fails removes its temporary file, ``<digest>.<pid>.<thread>.tmp`` beside where the
blob would be; one killed leaves it, and ``temp_files`` finds those for ``tether gc``, which
removes them once older than its grace period.

``tether gc`` sets a blob it means to remove aside first (``<digest>.gc``) and checks again that
nothing refers to it. A gc killed in between leaves it aside: a read that misses a blob puts it
back from there (something refers to it, then), and the next gc puts every one back before it
decides again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading

import anyio

from .._errors import BlobError
from ._file import FileOps
from ._records import BlobRef

SUMMARY_CHARS = 200
ASIDE = ".gc"
"""The suffix of a blob ``tether gc`` has set aside while it checks that nothing refers to it."""
_TEMP = re.compile(r"[0-9a-f]{64}\.\d+\.\d+\.tmp")


class FileBlobStore:
    """Blobs under ``root``; ``put`` is durable when it returns."""

    def __init__(self, root: str, ops: FileOps) -> None:
        self.root = root
        self._ops = ops

    def path(self, digest: str) -> str:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise BlobError(digest, "not a sha256 hex digest")
        return os.path.join(self.root, digest[:2], digest)

    def put_sync(self, data: bytes) -> str:
        """Store ``data`` durably and return its digest (blocking)."""
        digest = hashlib.sha256(data).hexdigest()
        dest = self.path(digest)
        if os.path.exists(dest) and os.path.getsize(dest) == len(data):
            os.utime(dest)  # reused: a collector's grace period counts from now
            return digest
        folder = os.path.dirname(dest)
        self._ops.make_dirs(folder)
        tmp = f"{dest}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = self._ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                self._ops.write_all(fd, data, 0)
                self._ops.fsync(fd)
            finally:
                self._ops.close(fd)
            self._ops.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):  # give the space back (a full disk, say)
                self._ops.unlink(tmp)
            raise
        self._ops.fsync_dir(folder)
        return digest

    async def put(self, data: bytes, *, summary: str = "") -> BlobRef:
        """Store ``data`` durably off the event loop; return a reference to it.

        On cancellation: the write runs to completion in its thread; the blob may then exist
        without a record pointing to it, which is harmless.
        """
        digest = await anyio.to_thread.run_sync(self.put_sync, data)
        return BlobRef(digest=digest, size=len(data), summary=summary[:SUMMARY_CHARS])

    async def get(self, digest: str) -> bytes:
        """The bytes of blob ``digest``.

        Raises:
            BlobError: missing, unreadable (not a regular file, no permission), or its content
                does not match the digest.
        """
        import aiofiles  # imported on first use: it costs every process that never reads a blob

        path = self.path(digest)
        for last in (False, True):
            try:
                # Through the file layer: never blocks on a FIFO, and refuses anything not a file.
                async with aiofiles.open(path, "rb", opener=self._ops.open) as f:
                    data = await f.read()
                break
            except FileNotFoundError:
                if last or not await anyio.to_thread.run_sync(self.put_back, digest):
                    raise BlobError(digest, f"missing from {self.root}") from None
            except OSError as exc:
                raise BlobError(digest, f"cannot be read: {exc.strerror or exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise BlobError(digest, "content does not match its digest")
        return data

    def temp_files(self) -> list[str]:
        """Paths of the temporary files of blob writes that never finished, or are under way
        (blocking)."""
        return [
            os.path.join(self.root, sub, name)
            for sub in self._folders()
            for name in sorted(os.listdir(os.path.join(self.root, sub)))
            if _TEMP.fullmatch(name)
        ]

    def _folders(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        return [
            sub
            for sub in sorted(os.listdir(self.root))
            if len(sub) == 2 and os.path.isdir(os.path.join(self.root, sub))
        ]

    def put_back(self, digest: str) -> bool:
        """Put blob ``digest`` back from where ``tether gc`` set it aside, if it is there and the
        blob is not (blocking). Returns whether it did."""
        path = self.path(digest)
        if os.path.exists(path):
            return False
        try:
            self._ops.replace(path + ASIDE, path)
        except FileNotFoundError:
            return False
        self._ops.fsync_dir(os.path.dirname(path))
        return True

    def set_aside(self) -> list[str]:
        """The digests of blobs ``tether gc`` set aside and did not settle (blocking)."""
        return [
            n.removesuffix(ASIDE)
            for sub in self._folders()
            for n in sorted(os.listdir(os.path.join(self.root, sub)))
            if n.endswith(ASIDE) and len(n) == 64 + len(ASIDE)
        ]

    def digests(self) -> list[str]:
        """Every stored digest (blocking)."""
        found: list[str] = []
        for sub in self._folders():
            found.extend(
                n for n in sorted(os.listdir(os.path.join(self.root, sub))) if len(n) == 64
            )
        return found
