"""A ``FileStore``'s files, for the tools that work on them beside a running store: where each
file is and with which mode, which leftovers belong to which run, the suffix of what gc sets
aside, and reading a journal's bytes without a store (``scan``, ``read_file``).

``tether gc``, ``tether verify``/``repair`` and the crash harness are built on it.
"""

from __future__ import annotations

from ._blobs import ASIDE as ASIDE
from ._file import DEFAULT_FILE_OPS as DEFAULT_FILE_OPS
from ._file import DIR_MODE as DIR_MODE
from ._file import FILE_MODE as FILE_MODE
from ._leftovers import belongs_to as belongs_to
from ._listing import list_runs_dir as list_runs_dir
from ._offline import read_file as read_file
from ._reader import scan as scan
from ._writer import journal_path as journal_path
