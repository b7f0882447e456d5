"""The journal's machinery, for code that builds on it or tests it rather than on runs.

- ``FileOps``: the file layer every read, write and sync of a ``FileStore`` goes through; pass
  a subclass as ``FileStore(file_ops=...)`` to inject faults (``tether.testing.FaultyFileOps``).
- ``GroupCommitter``: the writer threads (or the ``io_uring`` ring) that make appends durable,
  sharing one sync among the groups that arrive together.
- ``Scan`` and ``Damage``: what reading a journal's bytes found (``verify_file`` returns a
  ``Scan``), and where and how it is damaged.
- ``FileBlobStore``: the content-addressed directory a ``FileStore`` keeps large payloads in
  (``FileStore.blobs``).
"""

from __future__ import annotations

from .._public import publish as _publish
from ._blobs import FileBlobStore as FileBlobStore
from ._commit import GroupCommitter as GroupCommitter
from ._file import FileOps as FileOps
from ._reader import Damage as Damage
from ._reader import Scan as Scan

__all__ = ["Damage", "FileBlobStore", "FileOps", "GroupCommitter", "Scan"]

_publish(__name__, globals(), __all__)
